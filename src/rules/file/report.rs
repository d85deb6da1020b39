//! How an error in a rules file is told: `origin:line:column: scope: field: message`, where
//! scope is the table (`defaults`, `skip #2`, `rule "api"`) and field the setting.

use std::fmt;
use std::ops::Range;

use serde_path_to_error::Segment;
use toml::de::{DeTable, DeValue};

use crate::error::{ConfigError, ConfigErrorKind};

/// The table an error is in, as named in messages.
pub(super) enum Scope {
    Defaults,
    /// 1-based.
    Skip(usize),
    /// 1-based; the name when the rule has one.
    Rule {
        index: usize,
        name: Option<String>,
    },
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Defaults => f.write_str("defaults"),
            Scope::Skip(index) => write!(f, "skip #{index}"),
            Scope::Rule {
                name: Some(name), ..
            } => write!(f, "rule {name:?}"),
            Scope::Rule { index, name: None } => write!(f, "rule #{index}"),
        }
    }
}

/// The file's text and name, to turn the byte spans toml reports into `origin:line:column:`.
pub(super) struct Source<'a> {
    pub(super) text: &'a str,
    pub(super) origin: &'a str,
}

impl Source<'_> {
    /// The 1-based line of a byte offset.
    pub(super) fn line(&self, offset: usize) -> usize {
        self.before(offset).bytes().filter(|&b| b == b'\n').count() + 1
    }

    /// 1-based line and column (in characters, as toml counts) of a byte offset. Only errors
    /// need it, so counting from the start of the file costs once per file.
    fn position(&self, offset: usize) -> (usize, usize) {
        let before = self.before(offset);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (self.line(offset), before[line_start..].chars().count() + 1)
    }

    /// The text before `offset` (or before the nearest character boundary under it).
    fn before(&self, offset: usize) -> &str {
        let mut end = offset.min(self.text.len());
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        &self.text[..end]
    }

    /// `origin:line:column: scope: field: message`.
    pub(super) fn error(
        &self,
        span: Range<usize>,
        scope: Option<&Scope>,
        field: Option<&str>,
        message: impl fmt::Display,
    ) -> ConfigError {
        let (line, column) = self.position(span.start);
        let mut text = format!("{}:{line}:{column}: ", self.origin);
        if let Some(scope) = scope {
            text.push_str(&format!("{scope}: "));
        }
        if let Some(field) = field {
            text.push_str(&format!("{field}: "));
        }
        text.push_str(&message.to_string());
        ConfigError::with_kind(ConfigErrorKind::RulesFile, text)
    }

    /// A TOML syntax error: toml's own message, on one line so a failed reload logs as one.
    pub(super) fn syntax_error(&self, e: &toml::de::Error) -> ConfigError {
        let message = format!("TOML syntax error: {}", one_line(e.message()));
        match e.span() {
            Some(span) => self.error(span, None, None, message),
            None => self.error(0..0, None, None, message),
        }
    }

    /// An error found while deserializing (an unknown field, a wrong type, a bad value), with
    /// the table and field it is in, found from its path (`rule[2].quota`).
    pub(super) fn shape_error(
        &self,
        e: &serde_path_to_error::Error<toml::de::Error>,
    ) -> ConfigError {
        let message = one_line(e.inner().message());
        let span = e.inner().span().unwrap_or(0..0);
        // Spanned values add a segment of their own; they are not in the file.
        let path: Vec<&Segment> = (e.path().iter())
            .filter(|s| {
                !matches!(s, Segment::Map { key } if key.starts_with("$__serde_spanned_private_"))
            })
            .collect();
        let (table, index, rest) = match path.as_slice() {
            [Segment::Map { key }, Segment::Seq { index }, rest @ ..] => (key, Some(*index), rest),
            [Segment::Map { key }, rest @ ..] => (key, None, rest),
            _ => return self.error(span, None, None, message),
        };
        let field = match rest.first() {
            Some(Segment::Map { key }) => Some(key.as_str()),
            _ => None,
        };
        // The file parsed before, so it parses again; only errors read it twice.
        let Ok(doc) = DeTable::parse(self.text) else {
            return self.error(span, None, None, message);
        };
        let doc = DeValue::Table(doc.into_inner());
        let table_value = match index {
            Some(i) => doc.get(table.as_str()).and_then(|t| t.get_ref().get(i)),
            None => doc.get(table.as_str()),
        };
        let scope = match (table.as_str(), index) {
            ("defaults", None) => Scope::Defaults,
            ("skip", Some(i)) => Scope::Skip(i + 1),
            ("rule", Some(i)) => Scope::Rule {
                index: i + 1,
                name: table_value
                    .and_then(|t| t.get_ref().get("name"))
                    .and_then(|n| n.get_ref().as_str())
                    .map(str::to_owned),
            },
            _ => return self.error(span, None, None, message),
        };
        // The field, when the error is in its value rather than its key (an unknown field).
        let start = span.start;
        let in_value = |field: &&str| {
            table_value
                .and_then(|t| t.get_ref().get(*field))
                .is_some_and(|v| v.span().contains(&start))
        };
        self.error(span, Some(&scope), field.filter(in_value), message)
    }
}

/// A message joined onto one line.
fn one_line(message: &str) -> String {
    message.trim().replace('\n', "; ")
}
