//! [`Global`]: one key for every request.

use http::request::Parts;

use super::KeyExtractor;

/// Gives every request the same key, `global`: one budget shared by everyone.
///
/// Why: to protect a resource with a fixed capacity (a downstream API, a database) whoever the
/// caller is; often layered under a per-client limit.
///
/// ```
/// use tollgate::key::{Global, KeyExtractor};
///
/// let (req, ()) = http::Request::builder().body(())?.into_parts();
/// assert_eq!(Global.extract(&req).as_deref(), Some("global"));
/// # Ok::<(), http::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Global;

impl KeyExtractor for Global {
    fn extract(&self, _req: &Parts) -> Option<String> {
        Some("global".to_owned())
    }

    fn describe(&self) -> String {
        "nothing (one key is shared by everyone)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_key_for_everyone() {
        let (a, ()) = http::Request::builder()
            .uri("/a")
            .body(())
            .unwrap()
            .into_parts();
        let (b, ()) = http::Request::builder()
            .method("POST")
            .uri("/b")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(Global.extract(&a), Global.extract(&b));
    }
}
