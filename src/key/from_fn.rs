//! [`from_fn`]: a closure as an extractor, with a description for the `400` body.

use std::fmt;

use http::request::Parts;

use super::KeyExtractor;

/// Makes `f` an extractor whose [`describe`](KeyExtractor::describe) text can be set with
/// [`FromFn::with_description`].
///
/// Closures are extractors only through `from_fn` (there is no blanket impl for `Fn`, so
/// `Arc<dyn KeyExtractor>` can be one). Its description tells clients refused for lack of a
/// key what to send; it also helps the compiler see that the closure takes a reference.
///
/// ```
/// use tollgate::key::{self, KeyExtractor};
///
/// let session = key::from_fn(|req| {
///     let cookies = req.headers.get("cookie")?.to_str().ok()?;
///     cookies
///         .split(';')
///         .find_map(|c| c.trim().strip_prefix("session="))
///         .map(str::to_owned)
/// })
/// .with_description("the session cookie");
///
/// let (req, ()) = http::Request::builder()
///     .header("cookie", "theme=dark; session=s-42")
///     .body(())?
///     .into_parts();
/// assert_eq!(session.extract(&req).as_deref(), Some("s-42"));
/// assert_eq!(session.describe(), "the session cookie");
/// # Ok::<(), http::Error>(())
/// ```
pub fn from_fn<F>(f: F) -> FromFn<F>
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    FromFn {
        f,
        description: "a client key".to_owned(),
    }
}

/// A closure with a description; built by [`from_fn`].
#[derive(Clone)]
pub struct FromFn<F> {
    f: F,
    description: String,
}

impl<F> FromFn<F> {
    /// What the closure reads, e.g. `"the session cookie"`, for the `400` body when a request
    /// has no key.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }
}

impl<F> KeyExtractor for FromFn<F>
where
    F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
{
    fn extract(&self, req: &Parts) -> Option<String> {
        (self.f)(req)
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}

impl<F> fmt::Debug for FromFn<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FromFn")
            .field("description", &self.description)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_the_closure_and_describes_it() {
        let key = from_fn(|req| Some(req.uri.path().len().to_string()));
        let (req, ()) = http::Request::builder()
            .uri("/abc")
            .body(())
            .unwrap()
            .into_parts();
        assert_eq!(key.extract(&req).as_deref(), Some("4"));
        assert_eq!(key.describe(), "a client key");
        let key = key.with_description("the path length");
        assert_eq!(key.describe(), "the path length");
        assert_eq!(
            format!("{key:?}"),
            r#"FromFn { description: "the path length", .. }"#
        );
    }
}
