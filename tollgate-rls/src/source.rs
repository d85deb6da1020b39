//! Where the configuration in force comes from: given once, fed from outside (xDS), or a
//! directory of YAML files read at start (any problem is an error then) and again whenever its
//! files change. The directory is a [`reload::Source`](crate::reload::Source), read by
//! [`Reloaded`]: a change that does not load is logged once at WARN with its file and why, and
//! counted (`ratelimit_service_config_load_error`); the last good configuration keeps serving.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

use super::config::{DuplicateDomains, RlsConfig};
use super::dir::Skipped;
use super::stats;
use tollgate::reload::{Event, Reloaded, Source};
use tollgate::{ConfigError, ConfigErrorKind};

/// How the directory is read, named here for the service that builds a source.
pub(crate) use super::dir::ConfigDir;

/// The configuration in force.
pub(crate) struct ConfigSource {
    config: Config,
}

/// Where the configuration in force is kept.
enum Config {
    /// Given once, or fed from outside through [`ConfigSource::set`].
    Given {
        current: ArcSwap<RlsConfig>,
        /// Whether a configuration has been given; false only for a source fed from outside
        /// ([`ConfigSource::fed`]) until its first configuration.
        loaded: tokio::sync::watch::Sender<bool>,
    },
    /// Read from a directory.
    Dir(Arc<Reloaded<YamlDir>>),
}

/// The configuration directory as a source that reloads: its files, compiled together.
struct YamlDir {
    dir: ConfigDir,
    /// The entries skipped at the last read, each warned about once.
    skipped: Mutex<Vec<Skipped>>,
    /// Whether its files have loaded; false only when they did not at start
    /// ([`ConfigSource::dir_or_unloaded`]), until they do.
    loaded: tokio::sync::watch::Sender<bool>,
}

impl ConfigSource {
    /// A configuration that never changes.
    pub(crate) fn fixed(config: RlsConfig) -> Arc<Self> {
        Self::given(config, true)
    }

    /// A source fed from outside (an xDS control plane) through [`set`](Self::set): nothing
    /// is loaded until the first configuration arrives.
    pub(crate) fn fed() -> Arc<Self> {
        Self::given(RlsConfig::default(), false)
    }

    fn given(config: RlsConfig, loaded: bool) -> Arc<Self> {
        Arc::new(Self {
            config: Config::Given {
                current: ArcSwap::from_pointee(config),
                loaded: tokio::sync::watch::Sender::new(loaded),
            },
        })
    }

    /// Puts `config` in force (a source fed from outside; one read from a directory takes
    /// nothing from outside).
    pub(crate) fn set(&self, config: RlsConfig) {
        if let Config::Given { current, loaded } = &self.config {
            current.store(Arc::new(config));
            loaded.send_replace(true);
        }
    }

    fn loaded_flag(&self) -> &tokio::sync::watch::Sender<bool> {
        match &self.config {
            Config::Given { loaded, .. } => loaded,
            Config::Dir(dir) => &dir.source().loaded,
        }
    }

    /// Whether a configuration is loaded (always, but for a fed source before its first, and
    /// a directory whose files have not loaded yet).
    pub(crate) fn loaded(&self) -> bool {
        *self.loaded_flag().borrow()
    }

    /// Resolves once a configuration is loaded.
    pub(crate) async fn wait_loaded(&self) {
        let mut loaded = self.loaded_flag().subscribe();
        let _ = loaded.wait_for(|loaded| *loaded).await;
    }

    /// The files of `dir`, loaded now: an error names the file and what is wrong with it.
    /// Entries that are not read (see [`ConfigDir::read`]) are logged, once each.
    pub(crate) fn dir(dir: ConfigDir) -> Result<Arc<Self>, ConfigError> {
        let reloaded = Reloaded::new(YamlDir::new(dir, true))?;
        stats::config_load(true);
        Ok(Self::reloaded(reloaded))
    }

    /// [`dir`](Self::dir), or with `unloaded_ok` [`dir_or_unloaded`](Self::dir_or_unloaded).
    /// A directory that does not exist is an empty configuration until it does, as the
    /// reference's runtime loader reads one (goruntime's walk of a missing directory finds no
    /// file).
    pub(crate) fn open(dir: ConfigDir, unloaded_ok: bool) -> Result<Arc<Self>, ConfigError> {
        if std::fs::symlink_metadata(&dir.path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
        {
            tracing::warn!(
                target: "tollgate::rls",
                "the configuration directory {} does not exist: serving an empty \
                 configuration until it does",
                dir.path.display()
            );
            let (reloaded, _) = Reloaded::new_or(YamlDir::new(dir, true), RlsConfig::default());
            stats::config_load(true);
            return Ok(Self::reloaded(reloaded));
        }
        match unloaded_ok {
            true => Ok(Self::dir_or_unloaded(dir)),
            false => Self::dir(dir),
        }
    }

    /// As [`dir`](Self::dir), but files that do not load leave the source without a
    /// configuration (logged and counted) until they do.
    pub(crate) fn dir_or_unloaded(dir: ConfigDir) -> Arc<Self> {
        let (reloaded, loaded) = Reloaded::new_or(YamlDir::new(dir, false), RlsConfig::default());
        stats::config_load(loaded.is_ok());
        if let Err(e) = &loaded {
            tracing::error!(
                target: "tollgate::rls",
                "{e}; serving without a configuration until the files load"
            );
        }
        reloaded.source().loaded.send_replace(loaded.is_ok());
        Self::reloaded(reloaded)
    }

    fn reloaded(reloaded: Reloaded<YamlDir>) -> Arc<Self> {
        Arc::new(Self {
            config: Config::Dir(Arc::new(reloaded)),
        })
    }

    /// Watches the directory, if any, on a thread of its own until the source is dropped.
    /// Polling, not filesystem events: it sees editors that replace files and Kubernetes
    /// ConfigMap symlink swaps alike.
    pub(crate) fn watch(&self) {
        let Config::Dir(dir) = &self.config else {
            return;
        };
        if let Err(e) = dir.watch("tollgate-rls-config") {
            tracing::error!(target: "tollgate::rls", "cannot watch the configuration for changes: {e}");
        }
    }

    /// The configuration in force.
    pub(crate) fn current(&self) -> Arc<RlsConfig> {
        match &self.config {
            Config::Given { current, .. } => current.load_full(),
            Config::Dir(dir) => dir.current(),
        }
    }

    /// Reads the directory now and swaps in its configuration; on error the one in force
    /// stays (and the failure is reported as the watcher's are). Without a directory there is
    /// nothing to read.
    pub(crate) fn reload(&self) -> Result<(), ConfigError> {
        match &self.config {
            Config::Given { .. } => Ok(()),
            Config::Dir(dir) => dir.reload(),
        }
    }

    /// The watcher's look: a change is applied; a failure is logged and counted once.
    #[cfg(test)]
    fn poll(&self) {
        if let Config::Dir(dir) = &self.config {
            dir.poll();
        }
    }
}

impl YamlDir {
    fn new(dir: ConfigDir, loaded: bool) -> Self {
        Self {
            dir,
            skipped: Mutex::default(),
            loaded: tokio::sync::watch::Sender::new(loaded),
        }
    }

    /// Logs each skipped entry not skipped at the last read; remembers these.
    fn warn_skipped(&self, skipped: Vec<Skipped>) {
        let mut seen = self.skipped.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in &skipped {
            if !seen.contains(entry) {
                tracing::warn!(target: "tollgate::rls", "configuration directory: {entry}");
            }
        }
        *seen = skipped;
    }
}

impl Source for YamlDir {
    type Snapshot = Vec<(PathBuf, Vec<u8>)>;
    type Config = RlsConfig;
    type Error = ConfigError;

    /// The directory's files; entries skipped are warned about here, once each.
    fn read(&self) -> Result<Self::Snapshot, ConfigError> {
        let read = self.dir.read()?;
        self.warn_skipped(read.skipped);
        Ok(read.files)
    }

    fn parse(&self, files: &Self::Snapshot) -> Result<RlsConfig, ConfigError> {
        compile(files, self.dir.merge_domains)
    }

    /// A failure is logged at WARN and counted (`config_load_error`); a change applied is
    /// counted (`config_load_success`) and logged, and so is the first success after a
    /// failure.
    fn report(&self, event: Event<'_, Self::Snapshot, ConfigError>) {
        let path = self.dir.path.display();
        match event {
            Event::Failed(e) => {
                stats::config_load(false);
                tracing::warn!(
                    target: "tollgate::rls",
                    "{e}; keeping the configuration loaded before"
                );
            }
            Event::Applied(files) => {
                stats::config_load(true);
                self.loaded
                    .send_if_modified(|loaded| !std::mem::replace(loaded, true));
                tracing::info!(
                    target: "tollgate::rls",
                    "configuration reloaded from {path}: {} file(s)",
                    files.len()
                );
            }
            Event::Recovered => tracing::info!(
                target: "tollgate::rls",
                "configuration directory {path} can be read again; its configuration is in force"
            ),
            // An event the reload machine may report one day: nothing to count for it.
            _ => {}
        }
    }
}

impl fmt::Debug for ConfigSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dir = match &self.config {
            Config::Given { .. } => None,
            Config::Dir(dir) => Some(&dir.source().dir),
        };
        f.debug_struct("ConfigSource")
            .field("dir", &dir)
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
    use tollgate_test_kit::log::logged;

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
            .set_len(tollgate::rules::MAX_FILE_BYTES + 1)
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

    /// A ConfigMap read as Kubernetes deployments of the reference read it, with
    /// `RUNTIME_IGNOREDOTFILES` (its `..data` holds the same files again).
    #[test]
    fn a_config_map_swap_is_applied() {
        let dir = TempDir::new("swap");
        config_map(&dir, "a", EDGE);
        let mut config = dir.dir();
        config.ignore_dot_files = true;
        let source = ConfigSource::dir(config).unwrap();
        config_map(&dir, "b", &EDGE.replace("5 }", "9 }"));
        std::fs::remove_dir_all(dir.0.join("..2024_a")).unwrap();
        let log = logged(|| source.poll());
        assert!(!log.contains("WARN"), "{log}");
        assert!(limit_of(&source).contains("requests_per_unit=9"));
    }
}
