//! Hot reload: a rules file is read again when it changes, and its rules replace the old ones
//! whole. A file that fails to parse or validate is logged and the last good rules stay.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;

use super::RuleSet;
use crate::error::{ConfigError, ConfigErrorKind};

/// How often the file is looked at: changes apply within this (plus the read).
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// Builds the rule set from the file's text (the code's own rules included).
pub(crate) type Compile = Box<dyn Fn(&str) -> Result<RuleSet, ConfigError> + Send>;

/// Reads the rules file, for the first load.
pub(crate) fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigError::of(
            ConfigErrorKind::RulesFile,
            format!("cannot read rules file {}: {e}", path.display()),
        )
    })
}

/// Watches `path` on a thread of its own (so it needs no async runtime) until the rules it
/// updates are dropped with the layer. Polling, not filesystem events: it sees editors that
/// replace the file, network filesystems and Kubernetes ConfigMap symlink swaps alike.
pub(crate) fn watch(
    path: PathBuf,
    loaded: String,
    rules: &Arc<ArcSwap<RuleSet>>,
    compile: Compile,
) {
    let rules: Weak<ArcSwap<RuleSet>> = Arc::downgrade(rules);
    let spawned = std::thread::Builder::new()
        .name("tollgate-rules-reload".into())
        .spawn(move || {
            let mut last = loaded;
            loop {
                std::thread::sleep(POLL_INTERVAL);
                let Some(rules) = rules.upgrade() else { return };
                let text = match std::fs::read_to_string(&path) {
                    Ok(text) => text,
                    // Mid-save, or removed: keep the rules and look again.
                    Err(_) => continue,
                };
                if text == last {
                    continue;
                }
                match compile(&text) {
                    Ok(set) => {
                        rules.store(Arc::new(set));
                        tracing::info!(target: "tollgate", "reloaded rules from {}", path.display());
                    }
                    Err(e) => tracing::error!(
                        target: "tollgate",
                        "{e}; keeping the rules loaded before"
                    ),
                }
                last = text;
            }
        });
    if let Err(e) = spawned {
        tracing::error!(target: "tollgate", "cannot watch the rules file for changes: {e}");
    }
}
