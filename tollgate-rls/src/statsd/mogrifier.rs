//! DogStatsD mogrifiers (`USE_DOG_STATSD_MOGRIFIERS`): a statistic whose name matches a
//! pattern is sent under a new name with tags made of the match, as the reference's
//! `src/godogstats/mogrifier_map.go` does; the first mogrifier that matches applies.

use std::fmt;

use regex::Regex;

/// One mogrifier: a pattern, the name it gives, and the tags it adds; `$0`, `$1`… in the name
/// and the tags' values are the match and its groups.
#[derive(Clone)]
pub(crate) struct Mogrifier {
    pattern: Regex,
    name: String,
    tags: Vec<(String, String)>,
}

impl Mogrifier {
    /// A mogrifier, or why `pattern` is not a regular expression.
    pub(crate) fn new(
        pattern: &str,
        name: String,
        tags: Vec<(String, String)>,
    ) -> Result<Self, String> {
        let pattern = Regex::new(pattern).map_err(|e| e.to_string())?;
        Ok(Self {
            pattern,
            name,
            tags,
        })
    }
}

impl fmt::Debug for Mogrifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mogrifier")
            .field("pattern", &self.pattern.as_str())
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// `name` as the first of `mogrifiers` that matches it renames it, with the tags it adds
/// (`name:value`); unchanged and without tags when none matches.
pub(crate) fn mogrify(mogrifiers: &[Mogrifier], name: &str) -> (String, Vec<String>) {
    for m in mogrifiers {
        let Some(found) = m.pattern.captures(name) else {
            continue;
        };
        let groups: Vec<&str> = (0..found.len())
            .map(|i| found.get(i).map_or("", |g| g.as_str()))
            .collect();
        let tags = (m.tags.iter())
            .map(|(k, v)| format!("{k}:{}", substitute(v, &groups)))
            .collect();
        return (substitute(&m.name, &groups), tags);
    }
    (name.to_owned(), Vec::new())
}

/// `template` with each `$N` replaced by group N; one past the groups stays as written
/// (`makePatternHandler`).
fn substitute(template: &str, groups: &[&str]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let group = after[..digits].parse::<usize>().ok();
        match group.and_then(|i| groups.get(i)) {
            Some(value) => out.push_str(value),
            None => out.push_str(&rest[at..at + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example of the reference's README ("DogStatsD mogrifiers") and its
    /// `src/godogstats/mogrifier_map_test.go`: the domain and descriptor become tags.
    #[test]
    fn the_first_matching_mogrifier_renames_and_tags() {
        let descriptor = Mogrifier::new(
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
            "ratelimit.service.rate_limit.$3".into(),
            vec![
                ("domain".into(), "$1".into()),
                ("descriptor".into(), "$2".into()),
            ],
        )
        .unwrap();
        let never = Mogrifier::new("^nothing$", "x".into(), vec![]).unwrap();
        let list = [never, descriptor];
        assert_eq!(
            mogrify(&list, "ratelimit.service.rate_limit.edge.user_a.total_hits"),
            (
                "ratelimit.service.rate_limit.total_hits".to_owned(),
                vec!["domain:edge".to_owned(), "descriptor:user_a".to_owned()]
            )
        );
        assert_eq!(
            mogrify(&list, "ratelimit_server.ShouldRateLimit.total_requests"),
            (
                "ratelimit_server.ShouldRateLimit.total_requests".to_owned(),
                vec![]
            )
        );
    }

    #[test]
    fn placeholders_past_the_groups_stay() {
        assert_eq!(
            substitute("a.$1.$2.$9.$", &["all", "one", ""]),
            "a.one..$9.$"
        );
        assert_eq!(substitute("$10x", &["a"; 11]), "ax");
    }
}
