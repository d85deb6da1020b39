//! Where the rules in force come from: the code's rules and skips, then a rules file's. The
//! file is read again when it changes, or when the user asks (e.g. on SIGHUP), and its rules
//! replace the old ones whole. A file that cannot be used is reported once (a warning and
//! `tollgate_rules_reload_failures_total`) and the last good rules stay.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use arc_swap::ArcSwap;

use super::{parse_file, CompiledRule, NamedLookups, Rule, RuleSet, Skip};
use crate::algorithm::Algorithm;
use crate::error::{ConfigError, ConfigErrorKind};
use crate::key::KeyExtractor;
use crate::poll;
use crate::read::read_rules_file;
use crate::telemetry;

/// The rules in force and everything they are built from.
pub(crate) struct RuleSource {
    /// The code's rules, compiled once; they come before the file's.
    code_rules: Vec<CompiledRule>,
    code_skips: Vec<Skip>,
    /// For the file's rules: they set both, so these only matter to the code's rules.
    default_key: Arc<dyn KeyExtractor>,
    default_algorithm: Algorithm,
    /// The quota lookups the file's rules may name.
    lookups: NamedLookups,
    file: Option<PathBuf>,
    current: Current,
    /// Numbers the reads of the file, so that a read overtaken by a later one is not applied.
    reads: AtomicU64,
    /// What the reads found. Locked only to compare and swap, never across a read of the
    /// file, so a read that is slow never holds up another caller.
    seen: Mutex<Seen>,
}

/// Where the rules in force are kept.
enum Current {
    /// Without a rules file they never change: read with no count or slot touched.
    Fixed(Arc<RuleSet>),
    /// From a rules file: replaced whole on reload.
    Reloaded(ArcSwap<RuleSet>),
}

/// The rules a request is planned by. While it is decided in `call`, a reference or a guard of
/// the rules in force (no reference count touched: a count every core writes on every request
/// would move its cache line between them); owned once the request waits for a store.
pub(crate) enum InForce<'a> {
    Fixed(&'a Arc<RuleSet>),
    Guarded(arc_swap::Guard<Arc<RuleSet>>),
    Owned(Arc<RuleSet>),
}

impl InForce<'_> {
    /// The same rules, held by themselves: for a request that waits for a store (no guard or
    /// borrow is held across an await).
    pub(crate) fn owned(self) -> InForce<'static> {
        match self {
            InForce::Fixed(rules) => InForce::Owned(Arc::clone(rules)),
            InForce::Guarded(guard) => InForce::Owned(arc_swap::Guard::into_inner(guard)),
            InForce::Owned(rules) => InForce::Owned(rules),
        }
    }
}

impl std::ops::Deref for InForce<'_> {
    type Target = RuleSet;

    fn deref(&self) -> &RuleSet {
        match self {
            InForce::Fixed(rules) => rules,
            InForce::Guarded(guard) => guard,
            InForce::Owned(rules) => rules,
        }
    }
}

/// What the reads of the rules file found so far.
#[derive(Default)]
struct Seen {
    /// The number of the latest read settled here.
    read: u64,
    /// The file's bytes as last read, so the watcher acts on changes only.
    bytes: Vec<u8>,
    /// Why those bytes could not be used, if they could not.
    bytes_failure: Option<ConfigError>,
    /// The failure last reported (logged and counted), until a read succeeds: each distinct
    /// failure is reported once, not at every look.
    reported: Option<ConfigError>,
}

impl RuleSource {
    /// Compiles the code's rules and loads the file, if any. Any problem is an error here, at
    /// start-up.
    pub(crate) fn load(
        code_rules: &[Rule],
        code_skips: Vec<Skip>,
        default_key: Arc<dyn KeyExtractor>,
        default_algorithm: Algorithm,
        file: Option<PathBuf>,
        lookups: NamedLookups,
    ) -> Result<Arc<Self>, ConfigError> {
        let code_rules = code_rules
            .iter()
            .map(|rule| rule.compile(&default_key, default_algorithm))
            .collect::<Result<Vec<_>, _>>()?;
        let mut source = Self {
            code_rules,
            code_skips,
            default_key,
            default_algorithm,
            lookups,
            file,
            current: Current::Fixed(Arc::default()),
            reads: AtomicU64::new(0),
            seen: Mutex::default(),
        };
        let bytes = match &source.file {
            Some(path) => read_rules_file(path)?,
            None => Vec::new(),
        };
        let first = source.build(source.file.as_ref().map(|_| bytes.as_slice()))?;
        source.current = match source.file {
            Some(_) => Current::Reloaded(ArcSwap::from_pointee(first)),
            None => Current::Fixed(Arc::new(first)),
        };
        source.seen = Mutex::new(Seen {
            bytes,
            ..Seen::default()
        });
        Ok(Arc::new(source))
    }

    /// Rules from code only, compiled already: nothing to read, so it cannot fail.
    pub(crate) fn fixed(
        rules: RuleSet,
        default_key: Arc<dyn KeyExtractor>,
        default_algorithm: Algorithm,
    ) -> Arc<Self> {
        Arc::new(Self {
            code_rules: rules.rules().to_vec(),
            code_skips: Vec::new(),
            default_key,
            default_algorithm,
            lookups: NamedLookups::default(),
            file: None,
            current: Current::Fixed(Arc::new(rules)),
            reads: AtomicU64::new(0),
            seen: Mutex::default(),
        })
    }

    /// Watches the rules file, if any, on a thread of its own (so it needs no async runtime)
    /// until the source is dropped with the layer and its services. Polling, not filesystem
    /// events: it sees editors that replace the file, network filesystems and Kubernetes
    /// ConfigMap symlink swaps alike.
    pub(crate) fn watch(self: &Arc<Self>) {
        if self.file.is_none() {
            return;
        }
        if let Err(e) = poll::poll_until_dropped(self, "tollgate-rules-reload", Self::poll) {
            tracing::error!(target: "tollgate", "cannot watch the rules file for changes: {e}");
        }
    }

    /// The rules in force.
    pub(crate) fn current(&self) -> Arc<RuleSet> {
        match &self.current {
            Current::Fixed(rules) => Arc::clone(rules),
            Current::Reloaded(rules) => rules.load_full(),
        }
    }

    /// The rules in force, for the moment of one request's decision in `call`: cheaper than
    /// [`current`](Self::current), not to be held long.
    pub(crate) fn in_force(&self) -> InForce<'_> {
        match &self.current {
            Current::Fixed(rules) => InForce::Fixed(rules),
            Current::Reloaded(rules) => InForce::Guarded(rules.load()),
        }
    }

    /// Reads the rules file now and swaps in its rules; on error the rules in force stay (and
    /// the failure is reported as the watcher's are). Without a rules file there is nothing
    /// to read.
    pub(crate) fn reload(&self) -> Result<(), ConfigError> {
        let Some(path) = &self.file else {
            return Ok(());
        };
        let read = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        let bytes = read_rules_file(path);
        let mut seen = self.seen();
        if read < seen.read {
            // A later read was settled first: it stands, and this one only answers its caller.
            return bytes.and_then(|bytes| self.build(Some(&bytes)).map(drop));
        }
        seen.read = read;
        let outcome = bytes.and_then(|bytes| self.replace(bytes, &mut seen));
        self.settle(&mut seen, outcome.clone(), false);
        outcome
    }

    /// The watcher's look at the file: a change is applied, a failure reported once.
    fn poll(&self) {
        let Some(path) = &self.file else { return };
        let read = self.reads.fetch_add(1, Ordering::Relaxed) + 1;
        let bytes = read_rules_file(path);
        let mut seen = self.seen();
        if read < seen.read {
            return;
        }
        seen.read = read;
        let (outcome, changed) = match bytes {
            Err(e) => (Err(e), false),
            // The same bytes again: what they gave the last time.
            Ok(bytes) if bytes == seen.bytes => {
                (seen.bytes_failure.clone().map_or(Ok(()), Err), false)
            }
            Ok(bytes) => (self.replace(bytes, &mut seen), true),
        };
        self.settle(&mut seen, outcome, changed);
    }

    /// Reports what a read came to: a failure different from the last one reported is logged
    /// and counted; the first success after a failure (or a change applied) is logged.
    fn settle(&self, seen: &mut Seen, outcome: Result<(), ConfigError>, changed: bool) {
        let path = self.origin();
        match outcome {
            Ok(()) => {
                let recovered = seen.reported.take().is_some();
                if changed {
                    tracing::info!(target: "tollgate", "reloaded rules from {path}");
                } else if recovered {
                    tracing::info!(
                        target: "tollgate",
                        "rules file {path} can be used again; the rules in force are its rules"
                    );
                }
            }
            Err(e) => {
                if seen.reported.as_ref() != Some(&e) {
                    tracing::warn!(target: "tollgate", "{e}; keeping the rules loaded before");
                    telemetry::rules_reload_failure();
                    seen.reported = Some(e);
                }
            }
        }
    }

    /// Builds the rules from the file's new `bytes` and swaps them in; `bytes` become the last
    /// read either way, with their failure if any, so a broken file is parsed once, not on
    /// every look.
    fn replace(&self, bytes: Vec<u8>, seen: &mut Seen) -> Result<(), ConfigError> {
        let built = self.build(Some(&bytes));
        seen.bytes = bytes;
        seen.bytes_failure = built.as_ref().err().cloned();
        match &self.current {
            Current::Reloaded(rules) => rules.store(Arc::new(built?)),
            // Only a rules file is read again, and its rules are `Reloaded`.
            Current::Fixed(_) => drop(built?),
        }
        Ok(())
    }

    fn seen(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The code's rules and skips, then the file's.
    fn build(&self, file: Option<&[u8]>) -> Result<RuleSet, ConfigError> {
        let mut rules = self.code_rules.clone();
        let mut skips = self.code_skips.clone();
        if let Some(bytes) = file {
            let origin = self.origin();
            let fail = |why: String| {
                ConfigError::with_kind(ConfigErrorKind::RulesFile, format!("{origin}: {why}"))
            };
            let text = std::str::from_utf8(bytes)
                .map_err(|e| fail(format!("the rules file is not UTF-8 text ({e})")))?;
            let file = parse_file(text, &origin, &self.lookups)?;
            if file.rules.is_empty() {
                return Err(fail(
                    "the rules file has no [[rule]]; an empty file would lift every limit, so \
                     it is refused (write at least one rule, e.g. [[rule]] name = \"all\" \
                     quota = \"100/min\")"
                        .into(),
                ));
            }
            for rule in &file.rules {
                rules.push(rule.compile(&self.default_key, self.default_algorithm)?);
            }
            skips.extend(file.skips);
        }
        RuleSet::new(rules, skips)
    }

    /// The file's name in error messages.
    fn origin(&self) -> String {
        self.file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }
}

impl fmt::Debug for RuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuleSource")
            .field("file", &self.file)
            .field("current", &self.current())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::key;
    use crate::tests::log::logged;
    use crate::Quota;

    /// A rules file in a directory of its own, removed at the end.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(test: &str, bytes: &[u8]) -> Self {
            let dir =
                std::env::temp_dir().join(format!("tollgate-source-{test}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let file = Self(dir.join("rules.toml"));
            file.write(bytes);
            file
        }

        fn write(&self, bytes: &[u8]) {
            std::fs::write(&self.0, bytes).unwrap();
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            if let Some(dir) = self.0.parent() {
                let _ = std::fs::remove_dir_all(dir);
            }
        }
    }

    fn load(file: &TempFile) -> Result<Arc<RuleSource>, ConfigError> {
        RuleSource::load(
            &[Rule::new("code", Quota::per_second(1).unwrap())],
            Vec::new(),
            Arc::new(key::Global),
            Algorithm::Gcra,
            Some(file.0.clone()),
            NamedLookups::default(),
        )
    }

    fn names(source: &RuleSource) -> Vec<String> {
        let current = source.current();
        current
            .rules()
            .iter()
            .map(|r| r.policy.name().to_owned())
            .collect()
    }

    const ONE_RULE: &[u8] = b"[[rule]]\nname = \"file\"\nquota = \"5/min\"\n";

    #[test]
    fn the_code_rules_come_first_then_the_file() {
        let file = TempFile::new("order", ONE_RULE);
        assert_eq!(names(&load(&file).unwrap()), ["code", "file"]);
    }

    #[test]
    fn a_file_without_rules_is_refused_at_start_up() {
        for (name, text) in [
            ("empty", &b""[..]),
            ("comment", b"# limits come later\n"),
            ("skips-only", b"[[skip]]\npath = \"/health\"\n"),
            ("defaults-only", b"[defaults]\nquota = \"1/s\"\n"),
        ] {
            let file = TempFile::new(name, text);
            let e = load(&file).unwrap_err();
            assert_eq!(e.kind(), ConfigErrorKind::RulesFile);
            let message = e.to_string();
            assert!(
                message.starts_with(&format!("{}: ", file.0.display())),
                "{message}"
            );
            assert!(message.contains("has no [[rule]]"), "{message}");
            assert!(message.contains("lift every limit"), "{message}");
        }
    }

    #[test]
    fn a_file_that_is_not_utf8_is_refused_at_start_up() {
        let file = TempFile::new("latin1", b"[[rule]]\nname = \"caf\xe9\"\nquota = \"1/s\"\n");
        let message = load(&file).unwrap_err().to_string();
        assert!(
            message.contains("rules.toml: the rules file is not UTF-8 text"),
            "{message}"
        );
        assert!(message.contains("from index 20"), "{message}");
    }

    #[test]
    fn an_unusable_change_is_logged_once_and_the_rules_stay() {
        let file = TempFile::new("unusable", ONE_RULE);
        let source = load(&file).unwrap();
        for (bytes, expected) in [
            (&b""[..], "has no [[rule]]"),
            (b"\xff\xfe[[rule]]\n", "is not UTF-8 text"),
            (
                b"[[rule]]\nname = \"x\"\nquota = \"1/fortnight\"\n",
                "fortnight",
            ),
        ] {
            file.write(bytes);
            let log = logged(|| source.poll());
            assert!(log.contains(expected), "{log:?}");
            assert!(log.contains("keeping the rules loaded before"), "{log:?}");
            assert!(log.contains("WARN"), "{log:?}");
            assert_eq!(names(&source), ["code", "file"]);
            // The same bytes again are not news.
            assert_eq!(logged(|| source.poll()), "");
            // Asked to reload, the source says why it cannot.
            let e = source.reload().unwrap_err().to_string();
            assert!(e.contains(expected), "{e}");
            assert_eq!(names(&source), ["code", "file"]);
        }
        file.write(b"[[rule]]\nname = \"new\"\nquota = \"5/min\"\n");
        let log = logged(|| source.poll());
        assert!(log.contains("reloaded rules from"), "{log:?}");
        assert_eq!(names(&source), ["code", "new"]);
    }

    #[test]
    fn reload_reads_the_file_now() {
        let file = TempFile::new("now", ONE_RULE);
        let source = load(&file).unwrap();
        file.write(b"[[rule]]\nname = \"now\"\nquota = \"5/min\"\n");
        source.reload().unwrap();
        assert_eq!(names(&source), ["code", "now"]);
        // A missing file is an error, and the rules stay.
        std::fs::remove_file(&file.0).unwrap();
        let e = source.reload().unwrap_err().to_string();
        assert!(e.contains("cannot read rules file"), "{e}");
        assert_eq!(names(&source), ["code", "now"]);
    }

    #[test]
    fn without_a_file_reload_does_nothing() {
        let source = RuleSource::load(
            &[Rule::new("code", Quota::per_second(1).unwrap())],
            Vec::new(),
            Arc::new(key::Global),
            Algorithm::Gcra,
            None,
            NamedLookups::default(),
        )
        .unwrap();
        source.reload().unwrap();
        assert_eq!(names(&source), ["code"]);
    }
}
