//! Where the configuration in force comes from: given once, or a directory of YAML files read
//! at start (any problem is an error then) and again whenever its files change. A change that
//! does not load is logged with its file and the last good configuration keeps serving.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

use super::config::RlsConfig;
use super::stats;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::watch;

/// A directory of configuration files and how to read it.
#[derive(Debug, Clone)]
pub(crate) struct ConfigDir {
    pub(crate) path: PathBuf,
    pub(crate) merge_domains: bool,
    pub(crate) ignore_dot_files: bool,
}

/// The configuration in force.
pub(crate) struct ConfigSource {
    current: ArcSwap<RlsConfig>,
    dir: Option<ConfigDir>,
    /// The files as last read, so the watcher acts on changes only. Held while they are read
    /// and applied, so reloads run one at a time.
    last_read: Mutex<Vec<(PathBuf, Vec<u8>)>>,
    /// Whether a configuration has been loaded; false only for a source fed from outside
    /// ([`ConfigSource::fed`]) until its first configuration.
    loaded: tokio::sync::watch::Sender<bool>,
}

impl ConfigSource {
    /// A configuration that never changes.
    pub(crate) fn fixed(config: RlsConfig) -> Arc<Self> {
        Arc::new(Self {
            current: ArcSwap::from_pointee(config),
            dir: None,
            last_read: Mutex::default(),
            loaded: tokio::sync::watch::Sender::new(true),
        })
    }

    /// A source fed from outside (an xDS control plane) through [`set`](Self::set): nothing
    /// is loaded until the first configuration arrives.
    pub(crate) fn fed() -> Arc<Self> {
        Arc::new(Self {
            current: ArcSwap::from_pointee(RlsConfig::default()),
            dir: None,
            last_read: Mutex::default(),
            loaded: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Puts `config` in force (a source fed from outside).
    pub(crate) fn set(&self, config: RlsConfig) {
        self.current.store(Arc::new(config));
        self.loaded.send_replace(true);
    }

    /// Whether a configuration is loaded (always, but for a fed source before its first).
    pub(crate) fn loaded(&self) -> bool {
        *self.loaded.borrow()
    }

    /// Resolves once a configuration is loaded.
    pub(crate) async fn wait_loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        let _ = loaded.wait_for(|loaded| *loaded).await;
    }

    /// The files of `dir`, loaded now: an error names the file and what is wrong with it.
    pub(crate) fn dir(dir: ConfigDir) -> Result<Arc<Self>, ConfigError> {
        let files = read_dir(&dir)?;
        let config = compile(&files, dir.merge_domains)?;
        stats::config_load(true);
        Ok(Arc::new(Self {
            current: ArcSwap::from_pointee(config),
            dir: Some(dir),
            last_read: Mutex::new(files),
            loaded: tokio::sync::watch::Sender::new(true),
        }))
    }

    /// Watches the directory, if any, on a thread of its own until the source is dropped.
    /// Polling, not filesystem events: it sees editors that replace files and Kubernetes
    /// ConfigMap symlink swaps alike.
    pub(crate) fn watch(self: &Arc<Self>) {
        if self.dir.is_none() {
            return;
        }
        if let Err(e) = watch::poll_until_dropped(self, "tollgate-rls-config", Self::poll) {
            tracing::error!(target: "tollgate::rls", "cannot watch the configuration for changes: {e}");
        }
    }

    /// The configuration in force.
    pub(crate) fn current(&self) -> Arc<RlsConfig> {
        self.current.load_full()
    }

    /// Reads the directory now and swaps in its configuration; on error the one in force
    /// stays. Without a directory there is nothing to read.
    pub(crate) fn reload(&self) -> Result<(), ConfigError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let mut last_read = self
            .last_read
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let files = read_dir(dir)?;
        let loaded = self.apply(dir, &files);
        *last_read = files;
        loaded
    }

    /// The watcher's look: a change is applied, or logged (once) when it cannot be.
    fn poll(&self) {
        let Some(dir) = &self.dir else { return };
        let mut last_read = self
            .last_read
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let files = match read_dir(dir) {
            Ok(files) => files,
            Err(e) => {
                // Mid-swap or gone: keep the configuration and look again.
                tracing::debug!(target: "tollgate::rls", "{e}");
                return;
            }
        };
        if files == *last_read {
            return;
        }
        match self.apply(dir, &files) {
            Ok(()) => tracing::info!(
                target: "tollgate::rls",
                "configuration reloaded from {}: {} file(s)",
                dir.path.display(),
                files.len()
            ),
            Err(e) => tracing::error!(
                target: "tollgate::rls",
                "{e}; keeping the configuration loaded before"
            ),
        }
        *last_read = files;
    }

    fn apply(&self, dir: &ConfigDir, files: &[(PathBuf, Vec<u8>)]) -> Result<(), ConfigError> {
        let loaded = compile(files, dir.merge_domains);
        stats::config_load(loaded.is_ok());
        self.current.store(Arc::new(loaded?));
        Ok(())
    }
}

impl fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigSource")
            .field("dir", &self.dir)
            .field("domains", &self.current().domains().count())
            .finish()
    }
}

fn compile(files: &[(PathBuf, Vec<u8>)], merge: bool) -> Result<RlsConfig, ConfigError> {
    let mut texts = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        let text = std::str::from_utf8(bytes).map_err(|_| {
            ConfigError::of(
                ConfigErrorKind::RulesFile,
                format!("{}: the file is not UTF-8 text", path.display()),
            )
        })?;
        texts.push((path.display().to_string(), text));
    }
    RlsConfig::from_yaml(texts.iter().map(|(n, t)| (n.as_str(), *t)), merge)
}

/// Every file under `dir` (its subdirectories too, but not hidden ones such as Kubernetes'
/// `..data`), sorted by path; hidden files only unless `ignore_dot_files`.
fn read_dir(dir: &ConfigDir) -> Result<Vec<(PathBuf, Vec<u8>)>, ConfigError> {
    let mut files = Vec::new();
    walk(&dir.path, dir.ignore_dot_files, &mut files)?;
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

fn walk(
    path: &Path,
    ignore_dot_files: bool,
    files: &mut Vec<(PathBuf, Vec<u8>)>,
) -> Result<(), ConfigError> {
    let fail = |e: std::io::Error| {
        ConfigError::of(
            ConfigErrorKind::RulesFile,
            format!(
                "cannot read the configuration directory {}: {e}",
                path.display()
            ),
        )
    };
    for entry in std::fs::read_dir(path).map_err(fail)? {
        let entry = entry.map_err(fail)?;
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        // Follows symbolic links, as a ConfigMap's files are links.
        let meta = std::fs::metadata(&path).map_err(fail)?;
        if meta.is_dir() {
            if !hidden {
                walk(&path, ignore_dot_files, files)?;
            }
        } else if meta.is_file() && !(hidden && ignore_dot_files) {
            let bytes = std::fs::read(&path).map_err(|e| {
                ConfigError::of(
                    ConfigErrorKind::RulesFile,
                    format!("{}: cannot read the file: {e}", path.display()),
                )
            })?;
            files.push((path, bytes));
        }
    }
    Ok(())
}
