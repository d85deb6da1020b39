//! Which requests a rule (or a skip entry) applies to: methods and a path pattern.

use http::request::Parts;
use http::Method;

use crate::error::{ConfigError, ConfigErrorKind};

/// Methods (empty = any) and a path pattern.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Route {
    methods: Vec<Method>,
    path: PathPattern,
}

/// `"/login"` (exact), `"/api/*"` (`/api` and everything under `/api/`), or `"*"` / none (any).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum PathPattern {
    #[default]
    Any,
    Exact(String),
    /// The pattern without its `*`, e.g. `"/api/"`.
    Prefix(String),
}

impl Route {
    pub(crate) fn new(methods: Vec<Method>, path: Option<&str>) -> Result<Self, ConfigError> {
        let path = match path {
            None | Some("*") | Some("/*") => PathPattern::Any,
            Some(p) if !p.starts_with('/') => {
                return Err(ConfigError::of(
                    ConfigErrorKind::Rule,
                    format!("path {p:?} must start with '/' (e.g. \"/login\" or \"/api/*\")"),
                ))
            }
            Some(p) => match p.strip_suffix('*') {
                Some(prefix) if prefix.ends_with('/') && !prefix.contains('*') => {
                    PathPattern::Prefix(prefix.to_owned())
                }
                None if !p.contains('*') => PathPattern::Exact(p.to_owned()),
                _ => {
                    return Err(ConfigError::of(
                        ConfigErrorKind::Rule,
                        format!(
                            "path {p:?}: '*' may only end a pattern, after a '/' (e.g. \"/api/*\")"
                        ),
                    ))
                }
            },
        };
        Ok(Self { methods, path })
    }

    pub(crate) fn matches(&self, parts: &Parts) -> bool {
        if !self.methods.is_empty() && !self.methods.contains(&parts.method) {
            return false;
        }
        let path = parts.uri.path();
        match &self.path {
            PathPattern::Any => true,
            PathPattern::Exact(p) => path == p,
            PathPattern::Prefix(prefix) => {
                path.starts_with(prefix.as_str()) || path == &prefix[..prefix.len() - 1]
            }
        }
    }
}

/// Parses method names such as `"POST"` (case-insensitive).
pub(crate) fn parse_methods<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Method>, ConfigError> {
    names
        .into_iter()
        .map(|name| {
            Method::from_bytes(name.to_ascii_uppercase().as_bytes()).map_err(|_| {
                ConfigError::of(
                    ConfigErrorKind::Rule,
                    format!("invalid HTTP method {name:?}"),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(method: &str, path: &str) -> Parts {
        http::Request::builder()
            .method(method)
            .uri(path)
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn exact_prefix_and_any() {
        let login = Route::new(vec![Method::POST], Some("/login")).unwrap();
        assert!(login.matches(&parts("POST", "/login")));
        assert!(!login.matches(&parts("GET", "/login")));
        assert!(!login.matches(&parts("POST", "/login/x")));
        let api = Route::new(vec![], Some("/api/*")).unwrap();
        for p in ["/api", "/api/", "/api/items", "/api/items/1?q=2"] {
            assert!(api.matches(&parts("GET", p)), "{p}");
        }
        assert!(!api.matches(&parts("GET", "/apix")));
        assert!(Route::new(vec![], None)
            .unwrap()
            .matches(&parts("PUT", "/x")));
    }

    #[test]
    fn bad_patterns_say_why() {
        assert!(Route::new(vec![], Some("api"))
            .unwrap_err()
            .to_string()
            .contains("start with '/'"));
        assert!(Route::new(vec![], Some("/a*b")).is_err());
        assert!(Route::new(vec![], Some("/api*")).is_err());
        assert!(parse_methods(["GET", "post"]).is_ok());
        assert!(parse_methods(["G E T"]).is_err());
    }
}
