//! Routes indexed by path, so finding the routes a request matches reads only the few whose
//! path can match, not every route: a file of 40,000 rules costs a request a handful of hash
//! lookups.

use std::collections::HashMap;

use foldhash::quality::RandomState;
use http::request::Parts;
use http::Method;
use smallvec::SmallVec;

use super::route::{PathPattern, Route};

/// The positions of the routes a request matches: a few at most, so no heap list per request.
pub(crate) type Positions = SmallVec<[usize; 4]>;

/// Positions of routes in their list, by path pattern.
#[derive(Debug, Clone, Default)]
pub(crate) struct RouteIndex {
    /// `"/login"` → the routes with exactly that path. foldhash, seeded at random: paths come
    /// from clients, and every request hashes its path here.
    exact: HashMap<String, Vec<usize>, RandomState>,
    /// `"/api"` (from `"/api/*"`) → the routes for `/api` and everything under it.
    prefix: HashMap<String, Vec<usize>, RandomState>,
    /// Routes for any path.
    any: Vec<usize>,
    /// Whether every route is for any path and any method (e.g. one global rule): each
    /// request then takes all of them, in order, with nothing to look up.
    takes_all: bool,
}

impl RouteIndex {
    pub(crate) fn new<'a>(routes: impl IntoIterator<Item = &'a Route>) -> Self {
        let mut index = Self::default();
        let mut any_method = true;
        for (position, route) in routes.into_iter().enumerate() {
            any_method &= route.any_method();
            match route.path() {
                PathPattern::Any => &mut index.any,
                PathPattern::Exact(path) => index.exact.entry(path.clone()).or_default(),
                PathPattern::Prefix(prefix) => index.prefix.entry(prefix.clone()).or_default(),
            }
            .push(position);
        }
        index.takes_all = any_method && index.exact.is_empty() && index.prefix.is_empty();
        index
    }

    /// Whether every route takes every request (any path, any method).
    pub(crate) fn takes_all(&self) -> bool {
        self.takes_all
    }

    /// The positions, in order, of the routes in `routes` that take the request (see [`Route`]
    /// for HEAD).
    #[cfg(test)]
    pub(crate) fn matching(&self, routes: &[Route], parts: &Parts) -> Vec<usize> {
        self.matching_by(|position| &routes[position], parts)
            .into_vec()
    }

    /// The positions, in order, of the routes that take the request (see [`Route`] for HEAD),
    /// for routes held inside other values (`route` gives the one at a position).
    pub(crate) fn matching_by<'r>(
        &self,
        route: impl Fn(usize) -> &'r Route,
        parts: &Parts,
    ) -> Positions {
        if self.takes_all {
            // Also no routes at all (e.g. no skips): nothing to read of the request.
            return Positions::from_slice(&self.any);
        }
        let mut found = self.by_path(parts.uri.path());
        let head_has_own_route =
            parts.method == Method::HEAD && found.iter().any(|&p| route(p).lists(&Method::HEAD));
        found.retain(|p| route(*p).takes(&parts.method, head_has_own_route));
        found
    }

    /// The positions of the routes whose path pattern matches `path`, in order.
    fn by_path(&self, path: &str) -> Positions {
        let mut found = Positions::from_slice(&self.any);
        if self.exact.is_empty() && self.prefix.is_empty() {
            // Routes for any path only (e.g. one global rule): in order already.
            return found;
        }
        found.extend(self.exact.get(path).into_iter().flatten().copied());
        // A prefix `p` matches `path` when `path` is `p`, or `p` followed by a `/`.
        found.extend(self.prefix.get(path).into_iter().flatten().copied());
        for (slash, _) in path.match_indices('/').filter(|&(i, _)| i > 0) {
            found.extend(
                self.prefix
                    .get(&path[..slash])
                    .into_iter()
                    .flatten()
                    .copied(),
            );
        }
        found.sort_unstable();
        found
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

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

    fn route(methods: &[&str], path: Option<&str>) -> Route {
        let methods = methods.iter().map(|m| m.parse().unwrap()).collect();
        Route::new(methods, path).unwrap()
    }

    #[test]
    fn finds_exact_prefix_and_any_routes_in_order() {
        let routes = [
            route(&[], Some("/api/*")),
            route(&["POST"], Some("/login")),
            route(&[], None),
            route(&[], Some("/api/items")),
            route(&[], Some("/api/items/*")),
            route(&["GET"], Some("/login")),
        ];
        let index = RouteIndex::new(&routes);
        let found = |method: &str, path: &str| index.matching(&routes, &parts(method, path));
        assert_eq!(found("GET", "/api/items"), [0, 2, 3, 4]);
        assert_eq!(found("GET", "/api/items/7?x=1"), [0, 2, 4]);
        assert_eq!(found("GET", "/api"), [0, 2]);
        assert_eq!(found("GET", "/apix"), [2]);
        assert_eq!(found("POST", "/login"), [1, 2]);
        assert_eq!(found("GET", "/login"), [2, 5]);
        assert_eq!(found("HEAD", "/login"), [2, 5]);
    }

    #[test]
    fn head_goes_with_get_unless_a_route_for_the_path_lists_head() {
        let routes = [
            route(&["GET"], Some("/a")),
            route(&["GET"], Some("/b")),
            route(&["HEAD"], Some("/b")),
            route(&[], Some("/b")),
        ];
        let index = RouteIndex::new(&routes);
        let found = |method: &str, path: &str| index.matching(&routes, &parts(method, path));
        assert_eq!(found("HEAD", "/a"), [0]);
        assert_eq!(found("HEAD", "/b"), [2, 3]);
        assert_eq!(found("GET", "/b"), [1, 3]);
    }

    fn pattern() -> impl Strategy<Value = Option<String>> {
        prop_oneof![
            Just(None),
            Just(Some("/".to_owned())),
            "(/[ab]{1,2}){1,3}/?".prop_map(Some),
            "(/[ab]{1,2}){1,3}/\\*".prop_map(Some),
        ]
    }

    proptest! {
        /// The index finds exactly the routes that match when each is asked alone.
        #[test]
        fn the_index_agrees_with_every_route_alone(
            patterns in prop::collection::vec((pattern(), prop::bool::ANY), 0..12),
            path in "/|(/[ab]{1,2}){1,4}/?",
            head in prop::bool::ANY,
        ) {
            let routes: Vec<Route> = patterns
                .iter()
                .map(|(p, get)| route(if *get { &["GET"] } else { &[] }, p.as_deref()))
                .collect();
            let method = if head { "HEAD" } else { "GET" };
            let request = parts(method, &path);
            let expected: Vec<usize> = (0..routes.len())
                .filter(|&i| routes[i].matches(&request))
                .collect();
            prop_assert_eq!(RouteIndex::new(&routes).matching(&routes, &request), expected);
        }
    }
}
