//! Where the rules in force come from: the code's rules and skips, then a rules file's. The
//! file is read again when it changes, or when the user asks (e.g. on SIGHUP), and its rules
//! replace the old ones whole. A file that cannot be used is reported once (a warning and
//! `tollgate_rules_reload_failures_total`) and the last good rules stay: the rules file is a
//! [`reload::Source`](crate::reload::Source), read by [`Reloaded`].

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::rules_file::{CodeRules, RulesFile};
use super::{CompiledSkip, NamedLookups, Rule, RuleSet};
use crate::algorithm::Algorithm;
use crate::error::ConfigError;
use crate::key::KeyExtractor;
use crate::reload::Reloaded;

/// The rules in force and everything they are built from.
pub(crate) struct RuleSource {
    current: Current,
}

/// Where the rules in force are kept.
enum Current {
    /// Without a rules file they never change: read with no count or slot touched.
    Fixed(Arc<RuleSet>),
    /// From a rules file: replaced whole on reload.
    Reloaded(Arc<Reloaded<RulesFile>>),
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

impl RuleSource {
    /// Compiles the code's rules and loads the file, if any. Any problem is an error here, at
    /// start-up.
    pub(crate) fn load(
        code_rules: &[Rule],
        code_skips: Vec<CompiledSkip>,
        default_key: Arc<dyn KeyExtractor>,
        default_algorithm: Algorithm,
        file: Option<PathBuf>,
        lookups: NamedLookups,
    ) -> Result<Arc<Self>, ConfigError> {
        let code = CodeRules {
            rules: code_rules
                .iter()
                .map(|rule| rule.compile(&default_key, default_algorithm))
                .collect::<Result<Vec<_>, _>>()?,
            skips: code_skips,
            default_key,
            default_algorithm,
            lookups,
        };
        let current = match file {
            None => Current::Fixed(Arc::new(code.alone()?)),
            Some(path) => Current::Reloaded(Arc::new(Reloaded::new(RulesFile { path, code })?)),
        };
        Ok(Arc::new(Self { current }))
    }

    /// Rules from code only, compiled already: nothing to read, so it cannot fail.
    pub(crate) fn fixed(rules: RuleSet) -> Arc<Self> {
        Arc::new(Self {
            current: Current::Fixed(Arc::new(rules)),
        })
    }

    /// Watches the rules file, if any, on a thread of its own (so it needs no async runtime)
    /// until the source is dropped with the layer and its services.
    pub(crate) fn watch(&self) {
        let Current::Reloaded(file) = &self.current else {
            return;
        };
        if let Err(e) = file.watch("tollgate-rules-reload") {
            tracing::error!(target: "tollgate", "cannot watch the rules file for changes: {e}");
        }
    }

    /// The rules in force.
    pub(crate) fn current(&self) -> Arc<RuleSet> {
        match &self.current {
            Current::Fixed(rules) => Arc::clone(rules),
            Current::Reloaded(file) => file.current(),
        }
    }

    /// The rules in force, for the moment of one request's decision in `call`: cheaper than
    /// [`current`](Self::current), not to be held long.
    #[inline]
    pub(crate) fn in_force(&self) -> InForce<'_> {
        match &self.current {
            Current::Fixed(rules) => InForce::Fixed(rules),
            Current::Reloaded(file) => InForce::Guarded(file.guard()),
        }
    }

    /// Reads the rules file now and swaps in its rules; on error the rules in force stay (and
    /// the failure is reported as the watcher's are). Without a rules file there is nothing
    /// to read.
    pub(crate) fn reload(&self) -> Result<(), ConfigError> {
        match &self.current {
            Current::Fixed(_) => Ok(()),
            Current::Reloaded(file) => file.reload(),
        }
    }

    /// The watcher's look at the file: a change is applied, a failure reported once.
    #[cfg(test)]
    fn poll(&self) {
        if let Current::Reloaded(file) = &self.current {
            file.poll();
        }
    }
}

impl fmt::Debug for RuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = match &self.current {
            Current::Fixed(_) => None,
            Current::Reloaded(file) => Some(&file.source().path),
        };
        f.debug_struct("RuleSource")
            .field("file", &file)
            .field("current", &self.current())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::error::ConfigErrorKind;
    use crate::key;
    use crate::Quota;
    use tollgate_test_kit::log::logged;

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
