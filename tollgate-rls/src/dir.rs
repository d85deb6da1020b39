//! Reading the configuration directory without trusting it: regular files only, each read
//! as the rules file is (never waiting on a pipe, at most [`MAX_FILE_BYTES`]), at most
//! [`MAX_FILES`] files and [`MAX_DIR_BYTES`] in all. What cannot be read as a file (a symlink
//! that leads nowhere, a symlink loop, a pipe, a socket, a device) is skipped and said why, so
//! one editor's lock file (`.#edge.yaml`, a dangling link) does not stop the directory.

use std::collections::HashSet;
use std::fmt;
use std::path::{Path, PathBuf};

use tollgate::reload::{read_file, FileKind};
use tollgate::rules::MAX_FILE_BYTES;
use tollgate::{ConfigError, ConfigErrorKind};

/// The most files read from the directory, its subdirectories included.
pub(crate) const MAX_FILES: usize = 1000;

/// The most bytes read from the directory's files together: 16 MiB. A Kubernetes ConfigMap
/// holds at most 1 MiB, and every file is read again at each look (every 0.5 s).
pub(crate) const MAX_DIR_BYTES: u64 = 16 * 1024 * 1024;

/// A file of the configuration directory.
const CONFIG_FILE: FileKind = FileKind::new("configuration file", MAX_FILE_BYTES)
    .with_note("(4 MiB per file); a configuration file is a few kilobytes");

/// A directory of configuration files and how to read it.
#[derive(Debug, Clone)]
pub(crate) struct ConfigDir {
    pub(crate) path: PathBuf,
    pub(crate) merge_domains: bool,
    pub(crate) ignore_dot_files: bool,
}

/// The directory as read: its files sorted by path, and what was skipped.
#[derive(Debug, Default)]
pub(crate) struct DirRead {
    pub(crate) files: Vec<(PathBuf, Vec<u8>)>,
    pub(crate) skipped: Vec<Skipped>,
}

/// An entry that is not read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub(crate) path: PathBuf,
    pub(crate) why: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "skipped {}: {}", self.path.display(), self.why)
    }
}

impl ConfigDir {
    /// Every file under the directory and its subdirectories, following symlinks; hidden files
    /// and directories (Kubernetes' `..data`) too unless `ignore_dot_files`.
    /// An error names the file or the limit that stops the whole read.
    pub(crate) fn read(&self) -> Result<DirRead, ConfigError> {
        let mut walk = Walk {
            ignore_dot_files: self.ignore_dot_files,
            read: DirRead::default(),
            bytes: 0,
            visited: HashSet::new(),
        };
        walk.dir(&self.path)?;
        walk.read.files.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(walk.read)
    }
}

struct Walk {
    ignore_dot_files: bool,
    read: DirRead,
    /// The bytes read so far.
    bytes: u64,
    /// The directories read so far, by their real path: a link back to one is a loop.
    visited: HashSet<PathBuf>,
}

impl Walk {
    fn dir(&mut self, path: &Path) -> Result<(), ConfigError> {
        let fail = |e: std::io::Error| {
            ConfigError::with_kind(
                ConfigErrorKind::RulesFile,
                format!(
                    "cannot read the configuration directory {}: {e}",
                    path.display()
                ),
            )
        };
        let real = std::fs::canonicalize(path).map_err(fail)?;
        if !self.visited.insert(real) {
            self.skip(
                path,
                "it leads back to a directory already read (a symlink loop)".into(),
            );
            return Ok(());
        }
        let entries = std::fs::read_dir(path).map_err(fail)?;
        for entry in entries {
            let entry = entry.map_err(fail)?;
            let path = entry.path();
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if hidden && self.ignore_dot_files {
                continue;
            }
            let link = entry.file_type().is_ok_and(|t| t.is_symlink());
            // Follows symbolic links, as a ConfigMap's files are links.
            let meta = match std::fs::metadata(&path) {
                Ok(meta) => meta,
                Err(e) if link => {
                    self.skip(&path, format!("a symlink that cannot be followed ({e})"));
                    continue;
                }
                // Removed since it was listed.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(fail(e)),
            };
            if meta.is_dir() {
                // Hidden directories too, unless `ignore_dot_files`, as goruntime's walk
                // reads them (`walkDirectoryCallback`).
                self.dir(&path)?;
            } else if meta.is_file() {
                self.file(path)?;
            } else {
                self.skip(
                    &path,
                    "not a regular file (a pipe, a socket or a device)".into(),
                );
            }
        }
        Ok(())
    }

    fn file(&mut self, path: PathBuf) -> Result<(), ConfigError> {
        let over = |what: String| ConfigError::with_kind(ConfigErrorKind::RulesFile, what);
        if self.read.files.len() == MAX_FILES {
            return Err(over(format!(
                "the configuration directory has more than {MAX_FILES} files, the limit \
                 ({} would be one more)",
                path.display()
            )));
        }
        let bytes = read_file(&path, &CONFIG_FILE)?;
        self.bytes += bytes.len() as u64;
        if self.bytes > MAX_DIR_BYTES {
            return Err(over(format!(
                "the configuration directory's files hold more than {MAX_DIR_BYTES} bytes \
                 together (16 MiB), the limit (reached at {})",
                path.display()
            )));
        }
        self.read.files.push((path, bytes));
        Ok(())
    }

    fn skip(&mut self, path: &Path, why: String) {
        self.read.skipped.push(Skipped {
            path: path.to_owned(),
            why,
        });
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::os::unix::fs::symlink;
    use std::time::Duration;

    use super::*;

    /// A directory of its own under the temporary directory, removed at the end.
    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        pub(crate) fn new(test: &str) -> Self {
            let path = std::env::temp_dir()
                .join(format!("tollgate-rls-dir-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }

        pub(crate) fn write(&self, name: &str, text: &str) {
            let path = self.0.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }

        pub(crate) fn dir(&self) -> ConfigDir {
            ConfigDir {
                path: self.0.clone(),
                merge_domains: false,
                ignore_dot_files: false,
            }
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    pub(crate) const EDGE: &str =
        "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: { unit: minute, requests_per_unit: 5 }\n";

    fn names(read: &DirRead, root: &Path) -> Vec<String> {
        read.files
            .iter()
            .map(|(p, _)| p.strip_prefix(root).unwrap().display().to_string())
            .collect()
    }

    fn skipped(read: &DirRead, root: &Path) -> Vec<(String, String)> {
        read.skipped
            .iter()
            .map(|s| {
                let name = s.path.strip_prefix(root).unwrap().display().to_string();
                (name, s.why.clone())
            })
            .collect()
    }

    #[test]
    fn a_dangling_hidden_symlink_is_skipped_and_said_why() {
        let dir = TempDir::new("dangling");
        dir.write("edge.yaml", EDGE);
        // An editor's lock file: a symlink to `user@host.pid`, which is no file.
        symlink("user@host.1234", dir.0.join(".#edge.yaml")).unwrap();
        let read = dir.dir().read().unwrap();
        assert_eq!(names(&read, &dir.0), ["edge.yaml"]);
        assert_eq!(
            skipped(&read, &dir.0),
            [(
                ".#edge.yaml".to_owned(),
                "a symlink that cannot be followed (No such file or directory (os error 2))"
                    .to_owned()
            )]
        );
        // Ignored hidden files are not even looked at.
        let read = ConfigDir {
            ignore_dot_files: true,
            ..dir.dir()
        }
        .read()
        .unwrap();
        assert_eq!((names(&read, &dir.0).len(), read.skipped.len()), (1, 0));
    }

    #[test]
    fn symlink_loops_are_skipped() {
        let dir = TempDir::new("loop");
        dir.write("edge.yaml", EDGE);
        dir.write("sub/more.yaml", &EDGE.replace("edge", "more"));
        symlink(".", dir.0.join("loop")).unwrap();
        symlink("..", dir.0.join("sub/up")).unwrap();
        symlink("self", dir.0.join("self")).unwrap();
        let read = dir.dir().read().unwrap();
        assert_eq!(names(&read, &dir.0), ["edge.yaml", "sub/more.yaml"]);
        let mut skipped = skipped(&read, &dir.0);
        skipped.sort();
        let back = "it leads back to a directory already read (a symlink loop)".to_owned();
        assert_eq!(
            skipped,
            [
                ("loop".to_owned(), back.clone()),
                (
                    "self".to_owned(),
                    "a symlink that cannot be followed (Too many levels of symbolic links \
                     (os error 40))"
                        .to_owned()
                ),
                ("sub/up".to_owned(), back),
            ]
        );
    }

    #[test]
    fn a_named_pipe_is_skipped_without_waiting() {
        let dir = TempDir::new("fifo");
        dir.write("edge.yaml", EDGE);
        let fifo = dir.0.join("pipe.yaml");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let (tx, rx) = std::sync::mpsc::channel();
        let config = dir.dir();
        std::thread::spawn(move || tx.send(config.read().map(|r| (r.files.len(), r.skipped))));
        let (files, skipped) = rx
            .recv_timeout(Duration::from_secs(2))
            .expect("read within 2 s")
            .unwrap();
        assert_eq!(files, 1);
        assert_eq!(
            skipped,
            [Skipped {
                path: fifo,
                why: "not a regular file (a pipe, a socket or a device)".into()
            }]
        );
    }

    /// A sparse file of `len` bytes (zeros, no disk used).
    fn sparse(path: &Path, len: u64) {
        std::fs::File::create(path).unwrap().set_len(len).unwrap();
    }

    #[test]
    fn a_file_over_the_cap_stops_the_read_naming_it() {
        let dir = TempDir::new("large");
        dir.write("edge.yaml", EDGE);
        let big = dir.0.join("big.yaml");
        sparse(&big, MAX_FILE_BYTES + 1);
        let e = dir.dir().read().unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "cannot read configuration file {}: it is larger than the limit of 4194304 \
                 bytes (4 MiB per file); a configuration file is a few kilobytes",
                big.display()
            )
        );
        sparse(&big, MAX_FILE_BYTES);
        assert_eq!(dir.dir().read().unwrap().files.len(), 2);
    }

    #[test]
    fn the_directory_is_capped_in_bytes_and_in_files() {
        let dir = TempDir::new("caps");
        for i in 0..4 {
            sparse(&dir.0.join(format!("f{i}.yaml")), MAX_FILE_BYTES);
        }
        assert_eq!(dir.dir().read().unwrap().files.len(), 4);
        sparse(&dir.0.join("f4.yaml"), 1);
        let e = dir.dir().read().unwrap_err().to_string();
        assert!(
            e.starts_with(
                "the configuration directory's files hold more than 16777216 bytes together \
                 (16 MiB), the limit (reached at "
            ),
            "{e}"
        );

        let dir = TempDir::new("count");
        for i in 0..MAX_FILES {
            dir.write(&format!("f{i:04}.yaml"), "");
        }
        assert_eq!(dir.dir().read().unwrap().files.len(), MAX_FILES);
        dir.write("one-more.yaml", "");
        let e = dir.dir().read().unwrap_err().to_string();
        assert!(
            e.starts_with("the configuration directory has more than 1000 files, the limit"),
            "{e}"
        );
    }

    /// A ConfigMap as the kubelet lays it out: `edge.yaml -> ..data/edge.yaml`,
    /// `..data -> ..<timestamp>`; an update makes a new timestamped directory and swaps
    /// `..data` to it with a rename.
    pub(crate) fn config_map(dir: &TempDir, version: &str, text: &str) {
        let data = format!("..2024_{version}");
        dir.write(&format!("{data}/edge.yaml"), text);
        let tmp = dir.0.join("..data_tmp");
        symlink(&data, &tmp).unwrap();
        std::fs::rename(&tmp, dir.0.join("..data")).unwrap();
        let link = dir.0.join("edge.yaml");
        if std::fs::symlink_metadata(&link).is_err() {
            symlink("..data/edge.yaml", &link).unwrap();
        }
    }

    /// goruntime's walk (`loader.go`, `walkDirectoryCallback`) skips hidden directories with
    /// `RUNTIME_IGNOREDOTFILES` only: a ConfigMap's `..data` is read without it, and its files
    /// through their links only with it.
    #[test]
    fn a_config_map_is_read_through_its_links_and_its_hidden_directories_with_dot_files() {
        let dir = TempDir::new("configmap");
        config_map(&dir, "a", EDGE);
        let read = dir.dir().read().unwrap();
        assert_eq!(names(&read, &dir.0), ["..data/edge.yaml", "edge.yaml"]);
        let ignoring = ConfigDir {
            ignore_dot_files: true,
            ..dir.dir()
        };
        let read = ignoring.read().unwrap();
        assert_eq!(names(&read, &dir.0), ["edge.yaml"]);
        assert_eq!(
            (read.files[0].1.as_slice(), read.skipped.len()),
            (EDGE.as_bytes(), 0)
        );
        let changed = EDGE.replace("5 }", "6 }");
        config_map(&dir, "b", &changed);
        std::fs::remove_dir_all(dir.0.join("..2024_a")).unwrap();
        let read = ignoring.read().unwrap();
        assert_eq!(read.files[0].1, changed.as_bytes());
    }
}
