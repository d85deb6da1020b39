//! Which requests a rule (or a skip entry) applies to: methods and a path pattern.

#[cfg(test)]
use http::request::Parts;
use http::Method;

use crate::error::{ConfigError, ConfigErrorKind};

/// Methods (empty = any) and a path pattern.
///
/// A route for GET also takes HEAD, since servers answer HEAD with the GET handler (axum
/// does): a HEAD must not go around a GET limit. The exception mirrors axum's own: when a
/// route for the same path lists HEAD itself, HEAD is that route's business alone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Route {
    methods: Vec<Method>,
    path: PathPattern,
}

/// `"/login"` (exact), `"/api/*"` (`/api` and everything under `/api/`), or `"*"` / none (any).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum PathPattern {
    #[default]
    Any,
    Exact(String),
    /// The pattern without its `/*`, e.g. `"/api"`: matches `/api` and `/api/...`.
    Prefix(String),
}

impl Route {
    pub(crate) fn new(methods: Vec<Method>, path: Option<&str>) -> Result<Self, ConfigError> {
        let path = match path {
            None | Some("*") | Some("/*") => PathPattern::Any,
            Some(p) if !p.starts_with('/') => {
                return Err(ConfigError::with_kind(
                    ConfigErrorKind::Rule,
                    format!("path {p:?} must start with '/' (e.g. \"/login\" or \"/api/*\")"),
                ))
            }
            Some(p) => match p.strip_suffix("/*") {
                Some(prefix) if !prefix.contains('*') => PathPattern::Prefix(prefix.to_owned()),
                None if !p.contains('*') => PathPattern::Exact(p.to_owned()),
                _ => {
                    return Err(ConfigError::with_kind(
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

    /// Whether this route, alone, takes the request: the reference that [`RouteIndex`]
    /// (which serves requests) is tested against.
    ///
    /// [`RouteIndex`]: super::index::RouteIndex
    #[cfg(test)]
    pub(crate) fn matches(&self, parts: &Parts) -> bool {
        let path = parts.uri.path();
        let path_matches = match &self.path {
            PathPattern::Any => true,
            PathPattern::Exact(p) => path == p,
            PathPattern::Prefix(p) => path
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
        };
        path_matches && self.takes(&parts.method, false)
    }

    /// The path pattern, for indexing routes by path.
    pub(crate) fn path(&self) -> &PathPattern {
        &self.path
    }

    /// Whether the route takes every method (it lists none).
    pub(crate) fn any_method(&self) -> bool {
        self.methods.is_empty()
    }

    /// Whether the route names `method` itself.
    pub(crate) fn lists(&self, method: &Method) -> bool {
        self.methods.contains(method)
    }

    /// Whether the route takes requests with `method`. HEAD counts as GET unless
    /// `head_has_own_route`: another route for this path lists HEAD.
    pub(crate) fn takes(&self, method: &Method, head_has_own_route: bool) -> bool {
        self.methods.is_empty()
            || self.lists(method)
            || (method == Method::HEAD && !head_has_own_route && self.lists(&Method::GET))
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
                ConfigError::with_kind(
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
    fn a_route_for_get_takes_head_too() {
        let get = Route::new(vec![Method::GET], Some("/x")).unwrap();
        assert!(get.matches(&parts("HEAD", "/x")));
        assert!(get.matches(&parts("GET", "/x")));
        assert!(!get.matches(&parts("POST", "/x")));
        assert!(!get.matches(&parts("HEAD", "/y")));
        // Unless another route for the path lists HEAD itself.
        assert!(!get.takes(&Method::HEAD, true));
        let post = Route::new(vec![Method::POST], Some("/x")).unwrap();
        assert!(!post.matches(&parts("HEAD", "/x")));
        let head = Route::new(vec![Method::HEAD], Some("/x")).unwrap();
        assert!(head.matches(&parts("HEAD", "/x")));
        assert!(head.takes(&Method::HEAD, true));
        assert!(!head.matches(&parts("GET", "/x")));
        let any = Route::new(vec![], Some("/x")).unwrap();
        assert!(any.takes(&Method::HEAD, true));
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
