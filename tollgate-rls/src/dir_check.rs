//! Checking a configuration directory without serving it, for CI (the reference ships
//! `config_check_cmd`; `tollgate-rls check DIR` runs this): the directory read as the server
//! reads it, and every file that does not load named, not only the first.

use std::path::{Path, PathBuf};

use super::config::{DuplicateDomains, RlsConfig};
use super::dir::ConfigDir;
use tollgate::{ConfigError, ConfigErrorKind};

/// Whether [`RlsConfig::check_dir`] reads files whose name starts with `.`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DotFiles {
    /// Read them, as the reference does by default.
    #[default]
    Read,
    /// Skip them (the reference's `RUNTIME_IGNOREDOTFILES`). Hidden directories, such as
    /// Kubernetes' `..data`, are always skipped.
    Ignore,
}

/// What [`RlsConfig::check_dir`] found.
#[derive(Debug)]
#[non_exhaustive]
pub struct DirCheck {
    /// The files read, sorted by path.
    pub files: Vec<PathBuf>,
    /// The entries not read, each with why (a symlink that leads nowhere, a named pipe, …),
    /// as the server logs them.
    pub skipped: Vec<String>,
    /// Every problem, each naming its file (or the limit the directory is over): the server
    /// would refuse to start on any of them.
    pub errors: Vec<ConfigError>,
}

impl DirCheck {
    /// Whether the server would load the directory.
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

impl RlsConfig {
    /// Checks the configuration directory `dir` as the server would load it (see the
    /// [guide](crate::guide)): each file alone, then each file with the ones before it
    /// (a domain in two files is an error or merged, as `duplicates` says). Hidden files are
    /// read or skipped as `dot_files` says.
    ///
    /// ```
    /// use tollgate_rls::{DotFiles, DuplicateDomains, RlsConfig};
    ///
    /// let dir = std::env::temp_dir().join(format!("rls-check-doc-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// std::fs::write(dir.join("a.yaml"), "domain: a\ndescriptors:\n  - key: k\n    rate_limit: { unit: fortnight }\n")?;
    /// std::fs::write(dir.join("b.yaml"), "domain: b\n")?;
    /// let check = RlsConfig::check_dir(&dir, DuplicateDomains::Refuse, DotFiles::Read);
    /// assert_eq!(check.files.len(), 2);
    /// assert_eq!(check.errors.len(), 1);
    /// assert!(check.errors[0].to_string().ends_with("a.yaml: invalid rate limit unit 'fortnight'"));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn check_dir(
        dir: impl AsRef<Path>,
        duplicates: DuplicateDomains,
        dot_files: DotFiles,
    ) -> DirCheck {
        let merge_domains = duplicates == DuplicateDomains::Merge;
        let dir = ConfigDir {
            path: dir.as_ref().to_owned(),
            merge_domains,
            ignore_dot_files: dot_files == DotFiles::Ignore,
        };
        let read = match dir.read() {
            Ok(read) => read,
            Err(e) => {
                return DirCheck {
                    files: Vec::new(),
                    skipped: Vec::new(),
                    errors: vec![e],
                }
            }
        };
        let mut check = DirCheck {
            files: Vec::with_capacity(read.files.len()),
            skipped: read.skipped.iter().map(ToString::to_string).collect(),
            errors: Vec::new(),
        };
        let mut together = RlsConfig::default();
        for (path, bytes) in read.files {
            let name = path.display().to_string();
            let fail = |why: String| {
                ConfigError::with_kind(ConfigErrorKind::RulesFile, format!("{name}: {why}"))
            };
            let loaded = std::str::from_utf8(&bytes)
                .map_err(|_| fail("the file is not UTF-8 text".into()))
                .and_then(|text| {
                    RlsConfig::default()
                        .load_file(text, merge_domains)
                        .map_err(fail)?;
                    // Then with the files before it; a failed file leaves them as they were.
                    let mut with = together.clone();
                    with.load_file(text, merge_domains).map_err(fail)?;
                    together = with;
                    Ok(())
                });
            if let Err(e) = loaded {
                check.errors.push(e);
            }
            check.files.push(path);
        }
        check
    }
}
