//! The rules file as a configuration that reloads: how it is read (a regular file of at most
//! [`MAX_FILE_BYTES`]), what its rules are built into (the code's rules and skips, then the
//! file's), and how its failures are told (a WARN and `tollgate_rules_reload_failures_total`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{parse_file, CompiledRule, CompiledSkip, NamedLookups, RuleSet};
use crate::algorithm::Algorithm;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::key::KeyExtractor;
use crate::reload::{read_file, Event, FileKind, Source};
use crate::telemetry;

/// The largest rules file tollgate reads, and the largest file of the `rls` configuration
/// directory: 4 MiB.
///
/// A rules file is a few kilobytes, and the parser reads 2 MB in well under a second, so
/// this only stops a mistake or an attack: a path pointed at `/dev/zero`, a log file, a file
/// that keeps growing. The limit holds while reading (at most this many bytes plus one are
/// read), whatever size the file reports. A larger file is refused with an error that names
/// the file and the limit: a [`ConfigError`] at start-up, a logged failure on reload that
/// keeps the rules in force.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The rules file of [`RateLimitLayer::from_rules_file`](crate::RateLimitLayer::from_rules_file).
const RULES_FILE: FileKind = FileKind::new("rules file", MAX_FILE_BYTES)
    .with_note("(4 MiB, tollgate::rules::MAX_FILE_BYTES); a rules file is a few kilobytes");

/// The code's rules and skips, which come before a file's, and how a file's rules are
/// compiled.
pub(super) struct CodeRules {
    /// Compiled once.
    pub(super) rules: Vec<CompiledRule>,
    pub(super) skips: Vec<CompiledSkip>,
    /// For the file's rules: they set both, so these only matter to the code's rules.
    pub(super) default_key: Arc<dyn KeyExtractor>,
    pub(super) default_algorithm: Algorithm,
    /// The quota lookups the file's rules may name.
    pub(super) lookups: NamedLookups,
}

impl CodeRules {
    /// The code's rules and skips alone.
    pub(super) fn alone(&self) -> Result<RuleSet, ConfigError> {
        RuleSet::new(self.rules.clone(), self.skips.clone())
    }

    /// The code's rules and skips, then those of the file at `path`, which holds `bytes`.
    fn with_file(&self, path: &Path, bytes: &[u8]) -> Result<RuleSet, ConfigError> {
        let origin = path.display().to_string();
        let fail = |why: String| {
            ConfigError::with_kind(ConfigErrorKind::RulesFile, format!("{origin}: {why}"))
        };
        let text = std::str::from_utf8(bytes)
            .map_err(|e| fail(format!("the rules file is not UTF-8 text ({e})")))?;
        let file = parse_file(text, &origin, &self.lookups)?;
        if file.rules.is_empty() {
            return Err(fail(
                "the rules file has no [[rule]]; an empty file would lift every limit, so it \
                 is refused (write at least one rule, e.g. [[rule]] name = \"all\" quota = \
                 \"100/min\")"
                    .into(),
            ));
        }
        let mut rules = self.rules.clone();
        for rule in &file.rules {
            rules.push(rule.compile(&self.default_key, self.default_algorithm)?);
        }
        let mut skips = self.skips.clone();
        skips.extend(file.skips);
        RuleSet::new(rules, skips)
    }
}

/// A rules file, read again when it changes: its rules come after the code's.
pub(super) struct RulesFile {
    pub(super) path: PathBuf,
    pub(super) code: CodeRules,
}

impl Source for RulesFile {
    type Snapshot = Vec<u8>;
    type Config = RuleSet;
    type Error = ConfigError;

    fn read(&self) -> Result<Vec<u8>, ConfigError> {
        read_file(&self.path, &RULES_FILE)
    }

    fn parse(&self, bytes: &Vec<u8>) -> Result<RuleSet, ConfigError> {
        self.code.with_file(&self.path, bytes)
    }

    fn report(&self, event: Event<'_, Vec<u8>, ConfigError>) {
        let path = self.path.display();
        match event {
            Event::Failed(e) => {
                tracing::warn!(target: "tollgate", "{e}; keeping the rules loaded before");
                telemetry::rules_reload_failure();
            }
            Event::Applied(_) => tracing::info!(target: "tollgate", "reloaded rules from {path}"),
            Event::Recovered => tracing::info!(
                target: "tollgate",
                "rules file {path} can be used again; the rules in force are its rules"
            ),
        }
    }
}
