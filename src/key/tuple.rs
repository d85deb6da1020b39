//! Tuples of extractors: one key for each combination of their keys.

use std::fmt::Write as _;

use http::request::Parts;

use super::KeyExtractor;

/// Appends `part` as a netstring, `<length in bytes>:<part>,`, so that no two different lists
/// of parts give the same key (`("a,b", "c")` and `("a", "b,c")` stay apart).
fn push_part(key: &mut String, part: &str) {
    let _ = write!(key, "{}:{part},", part.len());
}

/// `"a"`, `"a and b"`, `"a, b and c"`.
fn describe_all(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [only] => only.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// Both keys: one bucket per pair, e.g. `(PeerIp::default(), Path)` for a budget per client and
/// endpoint. No key when either part has none.
///
/// The key is the parts as netstrings, `<len>:<part>,` each: `(10.0.0.1, /login)` gives
/// `8:10.0.0.1,6:/login,`.
///
/// ```
/// use tollgate::key::{KeyExtractor, Method, Path};
///
/// let (req, ()) = http::Request::builder()
///     .method("POST")
///     .uri("/login")
///     .body(())?
///     .into_parts();
/// assert_eq!((Method, Path).extract(&req).as_deref(), Some("4:POST,6:/login,"));
/// assert_eq!((Method, Path).describe(), "the request method and the request path");
/// # Ok::<(), http::Error>(())
/// ```
impl<A: KeyExtractor, B: KeyExtractor> KeyExtractor for (A, B) {
    fn extract(&self, req: &Parts) -> Option<String> {
        let (a, b) = (self.0.extract(req)?, self.1.extract(req)?);
        let mut key = String::with_capacity(a.len() + b.len() + 8);
        push_part(&mut key, &a);
        push_part(&mut key, &b);
        Some(key)
    }

    fn describe(&self) -> String {
        describe_all(&[self.0.describe(), self.1.describe()])
    }
}

/// All three keys: one bucket per combination, as for pairs. No key when any part has none.
impl<A: KeyExtractor, B: KeyExtractor, C: KeyExtractor> KeyExtractor for (A, B, C) {
    fn extract(&self, req: &Parts) -> Option<String> {
        let (a, b, c) = (
            self.0.extract(req)?,
            self.1.extract(req)?,
            self.2.extract(req)?,
        );
        let mut key = String::with_capacity(a.len() + b.len() + c.len() + 12);
        push_part(&mut key, &a);
        push_part(&mut key, &b);
        push_part(&mut key, &c);
        Some(key)
    }

    fn describe(&self) -> String {
        describe_all(&[self.0.describe(), self.1.describe(), self.2.describe()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{Header, Method, Path};
    use proptest::prelude::*;

    fn constant(key: Option<String>) -> impl KeyExtractor {
        crate::key::from_fn(move |_: &Parts| key.clone())
    }

    fn request() -> Parts {
        http::Request::builder()
            .method("DELETE")
            .uri("/a")
            .header("x-t", "t1")
            .body(())
            .unwrap()
            .into_parts()
            .0
    }

    #[test]
    fn combines_keys() {
        let req = request();
        assert_eq!(
            (Method, Path).extract(&req).as_deref(),
            Some("6:DELETE,2:/a,")
        );
        assert_eq!(
            (Header::new("x-t"), Method, Path).extract(&req).as_deref(),
            Some("2:t1,6:DELETE,2:/a,")
        );
        assert_eq!(
            (Header::new("x-t"), Method, Path).describe(),
            "the x-t header, the request method and the request path"
        );
    }

    #[test]
    fn none_if_any_part_missing() {
        let req = request();
        assert_eq!((Header::new("x-missing"), Method).extract(&req), None);
        assert_eq!((Method, Path, Header::new("x-missing")).extract(&req), None);
    }

    #[test]
    fn separators_in_parts_do_not_collide() {
        let req = request();
        let key =
            |a: &str, b: &str| (constant(Some(a.into())), constant(Some(b.into()))).extract(&req);
        assert_ne!(key("a,b", "c"), key("a", "b,c"));
        assert_ne!(key("1:a,", ""), key("", "1:a,"));
    }

    proptest! {
        #[test]
        fn pairs_are_injective(a in ".{0,10}", b in ".{0,10}", c in ".{0,10}", d in ".{0,10}") {
            prop_assume!((&a, &b) != (&c, &d));
            let req = request();
            let ab = (constant(Some(a)), constant(Some(b))).extract(&req);
            let cd = (constant(Some(c)), constant(Some(d))).extract(&req);
            prop_assert_ne!(ab, cd);
        }

        #[test]
        fn triples_are_injective(
            x in proptest::collection::vec(".{0,6}", 3),
            y in proptest::collection::vec(".{0,6}", 3),
        ) {
            prop_assume!(x != y);
            let req = request();
            let key = |v: &[String]| {
                (
                    constant(Some(v[0].clone())),
                    constant(Some(v[1].clone())),
                    constant(Some(v[2].clone())),
                )
                    .extract(&req)
            };
            prop_assert_ne!(key(&x), key(&y));
        }
    }
}
