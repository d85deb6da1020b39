//! [`Method`]: the request method.

use http::request::Parts;

use super::KeyExtractor;

/// Keys requests by their method, e.g. `POST`.
///
/// Why: writes often cost more than reads; in a tuple, `(PeerIp::default(), Method)` gives each
/// client one budget per method.
///
/// ```
/// use tollgate::key::{KeyExtractor, Method};
///
/// let (req, ()) = http::Request::builder().method("POST").body(())?.into_parts();
/// assert_eq!(Method.extract(&req).as_deref(), Some("POST"));
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Method;

impl KeyExtractor for Method {
    fn extract(&self, req: &Parts) -> Option<String> {
        Some(req.method.as_str().to_owned())
    }

    fn describe(&self) -> String {
        "the request method".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn method_name() {
        let (req, ()) = http::Request::builder()
            .method("PATCH")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(Method.extract(&req).as_deref(), Some("PATCH"));
        let (req, ()) = http::Request::builder().body(()).unwrap().into_parts();
        assert_eq!(Method.extract(&req).as_deref(), Some("GET"));
    }
}
