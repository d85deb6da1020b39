//! [`Path`]: the request path.

use http::request::Parts;

use super::KeyExtractor;

/// Keys requests by their path (without the query string), e.g. `/login`.
///
/// Why: to give each endpoint one budget shared by all clients, typically combined with a
/// client key in a tuple, `(PeerIp::default(), Path)`, for a budget per client and endpoint.
/// Clients choose paths freely, so on routes with parameters (`/users/{id}`) every value is a
/// new bucket; the layer bounds each key's size, not their number.
///
/// ```
/// use tollgate::key::{KeyExtractor, Path};
///
/// let (req, ()) = http::Request::builder().uri("/login?next=/").body(())?.into_parts();
/// assert_eq!(Path.extract(&req).as_deref(), Some("/login"));
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Path;

impl KeyExtractor for Path {
    fn extract(&self, req: &Parts) -> Option<String> {
        Some(req.uri.path().to_owned())
    }

    fn describe(&self) -> String {
        "the request path".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_without_query() {
        let (req, ()) = http::Request::builder()
            .uri("https://example.com/a/b?c=d")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(Path.extract(&req).as_deref(), Some("/a/b"));
        let (req, ()) = http::Request::builder()
            .uri("*")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(Path.extract(&req).as_deref(), Some("*"));
    }
}
