//! Credentials out of what is printed: Redis URLs carry passwords, and error messages, log lines
//! and `Debug` output end up in logs.

/// `url` as a log may show it: the credentials of a Redis URL replaced by `***`, whether the
/// URL parses or not. That is the password of `scheme://user:password@host` (a user alone,
/// `scheme://secret@host`, counts as one, since that is how many write a password), and the
/// value of a query parameter whose name contains `pass` (`redis+unix:///tmp/r.sock?pass=…`).
/// A URL that is not well formed is read generously: everything up to its last `@` is taken as
/// the user part, so a password holding `/`, `?` or `#` is still found. Every other occurrence
/// of a password in `url` goes too.
///
/// The store's own errors and `Debug` output show URLs this way; this is for an app that logs
/// the URL it was given.
///
/// ```
/// use tollgate::store::redacted_url;
///
/// assert_eq!(redacted_url("redis://app:s3cret@db:6379/0"), "redis://app:***@db:6379/0");
/// assert_eq!(redacted_url("redis+unix:///tmp/r.sock?pass=s3cret"), "redis+unix:///tmp/r.sock?pass=***");
/// assert_eq!(redacted_url("redis://db:6379"), "redis://db:6379");
/// ```
pub fn redacted_url(url: &str) -> String {
    Secrets::of(url).redact(url)
}

/// The credentials in a Redis URL, whether it parses or not (which ones: [`redacted_url`]), to
/// take out of the URL and of any text that may quote them (a parse error).
pub(crate) struct Secrets<'a>(Vec<&'a str>);

impl<'a> Secrets<'a> {
    pub(crate) fn of(url: &'a str) -> Self {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        let mut secrets = Vec::new();
        let after_user = match rest.rsplit_once('@') {
            Some((user_info, after)) => {
                secrets.push(user_info.split_once(':').map_or(user_info, |(_, p)| p));
                after
            }
            None => rest,
        };
        if let Some((_, query)) = after_user.split_once('?') {
            let query = query.split('#').next().unwrap_or_default();
            for pair in query.split('&') {
                if let Some((name, value)) = pair.split_once('=') {
                    if name.to_ascii_lowercase().contains("pass") {
                        secrets.push(value);
                    }
                }
            }
        }
        secrets.retain(|s| !s.is_empty());
        Self(secrets)
    }

    /// `text` with every credential replaced by `***`: the URL itself becomes e.g.
    /// `redis://user:***@host:6379/0`.
    pub(crate) fn redact(&self, text: &str) -> String {
        self.0
            .iter()
            .fold(text.to_owned(), |text, secret| text.replace(secret, "***"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_replaced_wherever_they_are() {
        for (url, redacted) in [
            (
                "redis://user:s3cret@host:6379/0",
                "redis://user:***@host:6379/0",
            ),
            ("rediss://:s3cret@host", "rediss://:***@host"),
            ("redis://s3cret@host", "redis://***@host"),
            ("redis://host:6379/0", "redis://host:6379/0"),
            ("redis://user:@host", "redis://user:@host"),
            // Not well formed: a password holding `/`, `?`, `#` or `@`, no scheme, a bad port.
            ("redis://user:s3/c?r#e@t@host", "redis://user:***@host"),
            ("user:s3cret@host", "user:***@host"),
            ("redis://u:s3cret@host:port", "redis://u:***@host:port"),
            (
                "redis+unix:///tmp/r.sock?db=1&pass=s3cret",
                "redis+unix:///tmp/r.sock?db=1&pass=***",
            ),
            (
                "redis+unix:///tmp/r.sock?Password=s3cret#x",
                "redis+unix:///tmp/r.sock?Password=***#x",
            ),
        ] {
            assert_eq!(redacted_url(url), redacted, "{url}");
        }
    }

    #[test]
    fn other_text_loses_the_same_secrets() {
        let secrets = Secrets::of("redis://admin:hunter2@db:6379");
        assert_eq!(
            secrets.redact("auth as admin with hunter2 failed"),
            "auth as admin with *** failed"
        );
    }
}
