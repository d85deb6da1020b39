//! Where the configuration in force comes from: given once, or a directory of YAML files read
//! at start (any problem is an error then) and again whenever its files change. A change that
//! does not load is logged once at WARN with its file and why, and counted
//! (`ratelimit_service_config_load_error`); the last good configuration keeps serving.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

use super::config::{DuplicateDomains, RlsConfig};
use super::dir::Skipped;
use super::stats;
use tollgate::{ConfigError, ConfigErrorKind};
use crate::poll;

/// How the directory is read, named here for the service that builds a source.
pub(crate) use super::dir::ConfigDir;

/// The configuration in force.
pub(crate) struct ConfigSource {
    current: ArcSwap<RlsConfig>,
    dir: Option<ConfigDir>,
    /// What was last read and reported. Held while files are read and applied, so reloads
    /// run one at a time.
    seen: Mutex<Seen>,
    /// Whether a configuration has been loaded; false only for a source fed from outside
    /// ([`ConfigSource::fed`]) until its first configuration.
    loaded: tokio::sync::watch::Sender<bool>,
}

/// What the watcher has seen, so that it acts on changes and reports each failure once.
#[derive(Default)]
struct Seen {
    /// The files as last read.
    files: Vec<(PathBuf, Vec<u8>)>,
    /// Why those files do not load, if they do not.
    files_failure: Option<ConfigError>,
    /// The entries skipped at the last read, each warned about once.
    skipped: Vec<Skipped>,
    /// The failure logged last, until a read succeeds.
    reported: Option<ConfigError>,
}

impl ConfigSource {
    /// A configuration that never changes.
    pub(crate) fn fixed(config: RlsConfig) -> Arc<Self> {
        Arc::new(Self {
            current: ArcSwap::from_pointee(config),
            dir: None,
            seen: Mutex::default(),
            loaded: tokio::sync::watch::Sender::new(true),
        })
    }

    /// A source fed from outside (an xDS control plane) through [`set`](Self::set): nothing
    /// is loaded until the first configuration arrives.
    pub(crate) fn fed() -> Arc<Self> {
        Arc::new(Self {
            current: ArcSwap::from_pointee(RlsConfig::default()),
            dir: None,
            seen: Mutex::default(),
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
    /// Entries that are not read (see [`ConfigDir::read`]) are logged, once each.
    pub(crate) fn dir(dir: ConfigDir) -> Result<Arc<Self>, ConfigError> {
        let read = dir.read()?;
        let config = compile(&read.files, dir.merge_domains)?;
        stats::config_load(true);
        let mut seen = Seen {
            files: read.files,
            ..Seen::default()
        };
        warn_skipped(&mut seen, read.skipped);
        Ok(Arc::new(Self {
            current: ArcSwap::from_pointee(config),
            dir: Some(dir),
            seen: Mutex::new(seen),
            loaded: tokio::sync::watch::Sender::new(true),
        }))
    }

    /// [`dir`](Self::dir), or with `unloaded_ok` [`dir_or_unloaded`](Self::dir_or_unloaded).
    pub(crate) fn open(dir: ConfigDir, unloaded_ok: bool) -> Result<Arc<Self>, ConfigError> {
        match unloaded_ok {
            true => Ok(Self::dir_or_unloaded(dir)),
            false => Self::dir(dir),
        }
    }

    /// As [`dir`](Self::dir), but files that do not load leave the source without a
    /// configuration (logged and counted) until they do.
    pub(crate) fn dir_or_unloaded(dir: ConfigDir) -> Arc<Self> {
        let mut seen = Seen::default();
        let loaded = dir.read().and_then(|read| {
            warn_skipped(&mut seen, read.skipped);
            seen.files = read.files;
            compile(&seen.files, dir.merge_domains)
        });
        stats::config_load(loaded.is_ok());
        if let Err(e) = &loaded {
            tracing::error!(
                target: "tollgate::rls",
                "{e}; serving without a configuration until the files load"
            );
            seen.files_failure = Some(e.clone());
            seen.reported = Some(e.clone());
        }
        Arc::new(Self {
            loaded: tokio::sync::watch::Sender::new(loaded.is_ok()),
            current: ArcSwap::from_pointee(loaded.unwrap_or_default()),
            dir: Some(dir),
            seen: Mutex::new(seen),
        })
    }

    /// Watches the directory, if any, on a thread of its own until the source is dropped.
    /// Polling, not filesystem events: it sees editors that replace files and Kubernetes
    /// ConfigMap symlink swaps alike.
    pub(crate) fn watch(self: &Arc<Self>) {
        if self.dir.is_none() {
            return;
        }
        if let Err(e) = poll::poll_until_dropped(self, "tollgate-rls-config", Self::poll) {
            tracing::error!(target: "tollgate::rls", "cannot watch the configuration for changes: {e}");
        }
    }

    /// The configuration in force.
    pub(crate) fn current(&self) -> Arc<RlsConfig> {
        self.current.load_full()
    }

    /// Reads the directory now and swaps in its configuration; on error the one in force
    /// stays (and the failure is reported as the watcher's are). Without a directory there is
    /// nothing to read.
    pub(crate) fn reload(&self) -> Result<(), ConfigError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let outcome = match dir.read() {
            Ok(read) => {
                warn_skipped(&mut seen, read.skipped);
                self.replace(dir, read.files, &mut seen)
            }
            Err(e) => Err(e),
        };
        self.settle(dir, &mut seen, outcome.clone(), true);
        outcome
    }

    /// The watcher's look: a change is applied; a failure is logged and counted once.
    fn poll(&self) {
        let Some(dir) = &self.dir else { return };
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        // A second look at once, should the first have met a ConfigMap mid-swap.
        let (outcome, changed) = match dir.read().or_else(|_| dir.read()) {
            Err(e) => (Err(e), false),
            Ok(read) => {
                warn_skipped(&mut seen, read.skipped);
                if read.files == seen.files && (self.loaded() || seen.files_failure.is_some()) {
                    // The same files again: what they gave the last time.
                    (seen.files_failure.clone().map_or(Ok(()), Err), false)
                } else {
                    (self.replace(dir, read.files, &mut seen), true)
                }
            }
        };
        self.settle(dir, &mut seen, outcome, changed);
    }

    /// Compiles `files` and swaps them in; they become the last read either way, with their
    /// failure if any, so that a broken file is compiled once, not at every look.
    fn replace(
        &self,
        dir: &ConfigDir,
        files: Vec<(PathBuf, Vec<u8>)>,
        seen: &mut Seen,
    ) -> Result<(), ConfigError> {
        let loaded = compile(&files, dir.merge_domains);
        seen.files = files;
        seen.files_failure = loaded.as_ref().err().cloned();
        self.current.store(Arc::new(loaded?));
        self.loaded
            .send_if_modified(|loaded| !std::mem::replace(loaded, true));
        Ok(())
    }

    /// Reports what a read came to. A failure is logged at WARN and counted
    /// (`config_load_error`) when it is a new one, or when it comes from changed files; a
    /// change applied is counted (`config_load_success`) and logged, and so is the first
    /// success after a failure.
    fn settle(
        &self,
        dir: &ConfigDir,
        seen: &mut Seen,
        outcome: Result<(), ConfigError>,
        changed: bool,
    ) {
        match outcome {
            Ok(()) => {
                let recovered = seen.reported.take().is_some();
                if changed {
                    stats::config_load(true);
                    tracing::info!(
                        target: "tollgate::rls",
                        "configuration reloaded from {}: {} file(s)",
                        dir.path.display(),
                        seen.files.len()
                    );
                } else if recovered {
                    tracing::info!(
                        target: "tollgate::rls",
                        "configuration directory {} can be read again; its configuration is in force",
                        dir.path.display()
                    );
                }
            }
            Err(e) => {
                if changed || seen.reported.as_ref() != Some(&e) {
                    stats::config_load(false);
                    tracing::warn!(
                        target: "tollgate::rls",
                        "{e}; keeping the configuration loaded before"
                    );
                    seen.reported = Some(e);
                }
            }
        }
    }
}

/// Logs each skipped entry not skipped at the last read; remembers these.
fn warn_skipped(seen: &mut Seen, skipped: Vec<Skipped>) {
    for entry in &skipped {
        if !seen.skipped.contains(entry) {
            tracing::warn!(target: "tollgate::rls", "configuration directory: {entry}");
        }
    }
    seen.skipped = skipped;
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
            ConfigError::with_kind(
                ConfigErrorKind::RulesFile,
                format!("{}: the file is not UTF-8 text", path.display()),
            )
        })?;
        texts.push((path.display().to_string(), text));
    }
    let duplicates = match merge {
        true => DuplicateDomains::Merge,
        false => DuplicateDomains::Refuse,
    };
    RlsConfig::from_yaml(texts.iter().map(|(n, t)| (n.as_str(), *t)), duplicates)
}

#[cfg(test)]
mod tests {
    use super::super::dir::tests::{config_map, TempDir, EDGE};
    use super::*;
    use crate::tests::log::logged;

    fn limit_of(source: &ConfigSource) -> String {
        source.current().dump()
    }

    /// `FORCE_START_WITHOUT_INITIAL_CONFIG` with files: no configuration until they load; the
    /// same broken files are logged once (at the start), not at every look.
    #[test]
    fn files_that_do_not_load_at_start_leave_it_unloaded_until_they_do() {
        let dir = TempDir::new("unloaded");
        dir.write("edge.yaml", &EDGE.replace("minute", "fortnight"));
        let (source, log) = {
            let mut made = None;
            let log = logged(|| made = Some(ConfigSource::dir_or_unloaded(dir.dir())));
            (made.unwrap(), log)
        };
        assert!(!source.loaded());
        assert!(log.contains("fortnight"), "{log}");
        let log = logged(|| (0..4).for_each(|_| source.poll()));
        assert_eq!(log.matches("WARN").count(), 0, "{log}");
        assert!(!source.loaded());

        dir.write("edge.yaml", EDGE);
        source.poll();
        assert!(source.loaded());
        assert!(limit_of(&source).contains("requests_per_unit=5"));
    }

    #[test]
    fn each_failure_is_logged_once_at_warn_and_the_last_good_configuration_serves() {
        let dir = TempDir::new("once");
        dir.write("edge.yaml", EDGE);
        let source = ConfigSource::dir(dir.dir()).unwrap();
        let good = limit_of(&source);
        assert!(good.contains("requests_per_unit=5"), "{good}");

        // A broken file: one warning however many looks.
        dir.write("edge.yaml", &EDGE.replace("minute", "fortnight"));
        let log = logged(|| (0..4).for_each(|_| source.poll()));
        let path = dir.0.join("edge.yaml");
        let broken = format!(
            "WARN tollgate::rls: {}: invalid rate limit unit 'fortnight'; keeping the \
             configuration loaded before",
            path.display()
        );
        assert_eq!(log.matches("WARN").count(), 1, "{log}");
        assert!(log.contains(&broken), "{log}");
        assert_eq!(limit_of(&source), good);

        // Another failure (the file grows past the cap) is logged, once too.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(crate::read::MAX_FILE_BYTES + 1)
            .unwrap();
        let log = logged(|| (0..4).for_each(|_| source.poll()));
        assert_eq!(log.matches("WARN").count(), 1, "{log}");
        assert!(
            log.contains(&format!(
                "cannot read configuration file {}: it is larger than the limit",
                path.display()
            )),
            "{log}"
        );
        assert_eq!(limit_of(&source), good);

        // A dangling hidden link is skipped with one warning, and a good change applies.
        std::os::unix::fs::symlink("nowhere", dir.0.join(".#edge.yaml")).unwrap();
        dir.write("edge.yaml", &EDGE.replace("5 }", "7 }"));
        let log = logged(|| (0..4).for_each(|_| source.poll()));
        assert_eq!(log.matches("WARN").count(), 1, "{log}");
        assert!(log.contains("configuration directory: skipped "), "{log}");
        assert!(
            log.contains("INFO tollgate::rls: configuration reloaded"),
            "{log}"
        );
        assert!(limit_of(&source).contains("requests_per_unit=7"));

        // The same broken content as before is a new failed reload: logged again.
        dir.write("edge.yaml", &EDGE.replace("minute", "fortnight"));
        let log = logged(|| (0..2).for_each(|_| source.poll()));
        assert!(log.contains(&broken), "{log}");
        assert!(source.reload().is_err());
        assert!(limit_of(&source).contains("requests_per_unit=7"));
    }

    #[test]
    fn a_config_map_swap_is_applied() {
        let dir = TempDir::new("swap");
        config_map(&dir, "a", EDGE);
        let source = ConfigSource::dir(dir.dir()).unwrap();
        config_map(&dir, "b", &EDGE.replace("5 }", "9 }"));
        std::fs::remove_dir_all(dir.0.join("..2024_a")).unwrap();
        let log = logged(|| source.poll());
        assert!(!log.contains("WARN"), "{log}");
        assert!(limit_of(&source).contains("requests_per_unit=9"));
    }
}
