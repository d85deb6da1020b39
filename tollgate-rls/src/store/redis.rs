//! The Redis store `REDIS_URL` names in the reference's forms: one Redis (`host:port`, a socket
//! path or a URL), a Sentinel's master (`master,sentinel1:port,…`) or a Cluster's nodes, with
//! `REDIS_AUTH`, `REDIS_TLS*` and `REDIS_POOL_SIZE` for every form.

use tollgate::store::{redacted_url, RedisOptions, RedisStore, RedisTls};

use crate::settings::{Redis, SettingsError, DEFAULT_REDIS_URL as DEFAULT_URL};

/// The Redis store `r` names, with the key prefix `prefix` (none when empty), and a
/// description of it for the log (credentials left out).
pub(crate) fn build(r: &Redis, prefix: &str) -> Result<(RedisStore, String), SettingsError> {
    let options = options(r)?;
    let fail = |e: tollgate::ConfigError| SettingsError::unusable("REDIS_URL", e.to_string());
    let store = match r.kind.as_str() {
        "single" => RedisStore::with_options(&url(r, r.url.trim(), ""), &options).map_err(fail)?,
        "cluster" => {
            let nodes: Vec<String> = (split(&r.url).into_iter())
                .filter(|n| !n.is_empty())
                .map(|n| url(r, n, ""))
                .collect();
            RedisStore::cluster_with_options(&nodes, &options).map_err(fail)?
        }
        "sentinel" => {
            // The reference's form: `master,sentinel1:port,sentinel2:port`. REDIS_AUTH is the
            // master's, REDIS_SENTINEL_AUTH the sentinels' (its `driver_impl.go` gives each
            // its own dialer).
            let mut parts = split(&r.url).into_iter().filter(|p| !p.is_empty());
            let master = parts.next().unwrap_or_default().to_owned();
            let sentinels: Vec<String> = parts.map(|s| url(r, s, &r.sentinel_auth)).collect();
            if sentinels.is_empty() {
                return Err(SettingsError::unusable(
                    "REDIS_URL",
                    "with REDIS_TYPE=sentinel, give the master's name then the sentinels: \
                     mymaster,host1:26379,host2:26379",
                ));
            }
            RedisStore::sentinel_with_options(&sentinels, &master, &options).map_err(fail)?
        }
        other => {
            let expected = "expected single, sentinel or cluster";
            return Err(SettingsError::invalid("REDIS_TYPE", other, expected));
        }
    };
    let store = match prefix {
        "" => store,
        prefix => store.prefix(prefix),
    };
    let described = match r.url == DEFAULT_URL {
        true => format!(
            "redis ({}, {DEFAULT_URL}: REDIS_URL unset, the reference's default)",
            r.kind
        ),
        false => format!("redis ({}, {})", r.kind, redacted(&r.url)),
    };
    Ok((store, described))
}

/// The comma-separated list of `REDIS_URL`, trimmed. Where it holds URLs, it is split only at a
/// comma before a scheme (`redis://`), so that a password or a query holding a comma stays in
/// its URL.
fn split(list: &str) -> Vec<&str> {
    if !list.contains("://") {
        return list.split(',').map(str::trim).collect();
    }
    let starts_url = |rest: &str| {
        rest.trim_start()
            .split_once("://")
            .is_some_and(|(scheme, _)| {
                !scheme.is_empty()
                    && scheme
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'+')
            })
    };
    let mut parts = Vec::new();
    let mut start = 0;
    for (at, _) in list.match_indices(',') {
        // A comma after the master's name (`mymaster,redis://…`) or before the next URL.
        let before = &list[start..at];
        if starts_url(&list[at + 1..]) || !before.contains("://") {
            parts.push(before.trim());
            start = at + 1;
        }
    }
    parts.push(list[start..].trim());
    parts
}

/// `REDIS_AUTH` (`password` or `user:password`, split at the first colon as the reference's
/// `driver_impl.go` does), `REDIS_POOL_SIZE` and the TLS settings, for every address form.
fn options(r: &Redis) -> Result<RedisOptions, SettingsError> {
    let mut options = RedisOptions::new().pool_size(r.pool_size);
    if !r.auth.is_empty() {
        options = match r.auth.split_once(':') {
            Some((user, password)) => options.username(user).password(password),
            None => options.password(r.auth.as_str()),
        };
    }
    // The TLS files are read only when Redis is reached over TLS, as the reference's
    // `RedisTlsConfig` reads them (`src/settings/settings.go`); set without it, they are
    // logged as ignored (`settings/ignored.rs`).
    if !r.tls && !r.url.contains("rediss://") {
        return Ok(options);
    }
    let read = |name: &str, path: &str| {
        let cannot = |e| SettingsError::invalid(name, path, format!("cannot read it: {e}"));
        std::fs::read(path).map_err(cannot)
    };
    let mut tls = RedisTls::new().skip_hostname_verification(r.tls_skip_hostname);
    if !r.tls_cacert.is_empty() {
        tls = tls.root_certificates(read("REDIS_TLS_CACERT", &r.tls_cacert)?);
    }
    match (r.tls_client_cert.as_str(), r.tls_client_key.as_str()) {
        ("", "") => {}
        (cert, "") if !cert.is_empty() => {
            let rest = "is set without REDIS_TLS_CLIENT_KEY";
            return Err(SettingsError::conflict("REDIS_TLS_CLIENT_CERT", rest));
        }
        ("", _) => {
            let rest = "is set without REDIS_TLS_CLIENT_CERT";
            return Err(SettingsError::conflict("REDIS_TLS_CLIENT_KEY", rest));
        }
        (cert, key) => {
            tls = tls.client_certificate(
                read("REDIS_TLS_CLIENT_CERT", cert)?,
                read("REDIS_TLS_CLIENT_KEY", key)?,
            );
        }
    }
    Ok(options.tls(tls))
}

/// One address as a URL: kept as given when it is one (with `auth` added when it carries no
/// credentials); else `host:port` (or, with `REDIS_SOCKET_TYPE=unix`, a socket path) with
/// `REDIS_TLS` and `auth` applied. `auth` is the sentinels'; every Redis gets `REDIS_AUTH`
/// through the store's options.
fn url(r: &Redis, address: &str, auth: &str) -> String {
    let credentials = match auth.split_once(':') {
        _ if auth.is_empty() => String::new(),
        Some((user, password)) => format!("{}:{}@", encode(user), encode(password)),
        None => format!(":{}@", encode(auth)),
    };
    if let Some((scheme, rest)) = address.split_once("://") {
        return match rest.contains('@') {
            true => address.to_owned(),
            false => format!("{scheme}://{credentials}{rest}"),
        };
    }
    if r.socket_type == "unix" && address.starts_with('/') {
        return format!("redis+unix://{address}");
    }
    let scheme = if r.tls { "rediss" } else { "redis" };
    format!("{scheme}://{credentials}{address}")
}

/// Percent-encodes what a URL's user information cannot hold as it is.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `REDIS_URL` as the log shows it, each URL of a list without its credentials (the library's
/// redaction, one URL at a time so that each keeps its host). A list of bare addresses
/// (`master,host:port`) is one text to the redaction.
fn redacted(urls: &str) -> String {
    match urls.contains("://") {
        true => (split(urls).into_iter().map(redacted_url))
            .collect::<Vec<_>>()
            .join(","),
        false => redacted_url(urls.trim()),
    }
}

/// How often the Redis pool's size is published.
const POOL_GAUGE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Publishes the Redis pool's open connections as `ratelimit_redis_pool_cx_active` (the
/// reference's `ratelimit.redis_pool.cx_active` gauge, `src/redis/driver_impl.go`, under the
/// name its Prometheus sink gives a statistic its mapping does not name), for the life of the
/// process.
pub(crate) async fn publish_pool_size(redis: RedisStore) {
    let gauge = metrics::gauge!("ratelimit_redis_pool_cx_active");
    let mut every = tokio::time::interval(POOL_GAUGE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        gauge.set(redis.pool_status().size as f64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(url: &str) -> Redis {
        Redis {
            url: url.into(),
            kind: "single".into(),
            socket_type: "tcp".into(),
            auth: String::new(),
            sentinel_auth: String::new(),
            tls: false,
            tls_skip_hostname: false,
            tls_cacert: String::new(),
            tls_client_cert: String::new(),
            tls_client_key: String::new(),
            pool_size: 10,
            health_follows: false,
        }
    }

    fn built(r: &Redis) -> Result<(RedisStore, String), String> {
        build(r, "").map_err(|e| e.to_string())
    }

    #[test]
    fn the_references_address_forms_become_urls() {
        let mut r = redis("redis:6379");
        assert_eq!(url(&r, "redis:6379", ""), "redis://redis:6379");
        r.tls = true;
        assert_eq!(url(&r, "h:6380", "p@ss"), "rediss://:p%40ss@h:6380");
        r.tls_skip_hostname = true;
        assert_eq!(url(&r, "h:6380", "user:pw"), "rediss://user:pw@h:6380");
        r.socket_type = "unix".into();
        assert_eq!(
            url(&r, "/var/run/redis.sock", ""),
            "redis+unix:///var/run/redis.sock"
        );
        assert_eq!(url(&r, "redis://x:1", "s"), "redis://:s@x:1");
        assert_eq!(url(&r, "redis://u:own@x:1", "s"), "redis://u:own@x:1");
    }

    #[test]
    fn lists_split_between_urls_only() {
        assert_eq!(split("m, h1:1,h2:2"), ["m", "h1:1", "h2:2"]);
        assert_eq!(
            split("redis://:a,b@h1:1,rediss://h2:2?password=c,d"),
            ["redis://:a,b@h1:1", "rediss://h2:2?password=c,d"]
        );
        assert_eq!(split("m,redis://:a,b@h:1"), ["m", "redis://:a,b@h:1"]);
    }

    #[test]
    fn credentials_never_reach_the_log() {
        for (given, shown) in [
            ("redis://u:pw@h:1,h2:2", "redis://u:***@h:1,h2:2"),
            ("redis://:pa,ss@h:1", "redis://:***@h:1"),
            (
                "redis://:a,b@h1:1,redis://:c@d,e@h2:2",
                "redis://:***@h1:1,redis://:***@h2:2",
            ),
            (
                "redis://h:1/0?password=s3cret",
                "redis://h:1/0?password=***",
            ),
            ("redis://h:1?password=a,b", "redis://h:1?password=***"),
            (
                "redis+unix:///tmp/r.sock?pass=s3cret",
                "redis+unix:///tmp/r.sock?pass=***",
            ),
            ("m,u:pw@h:1", "m,u:***@h:1"),
            ("u:pa,ss@h:1", "u:***@h:1"),
            ("h:1", "h:1"),
        ] {
            assert_eq!(redacted(given), shown, "{given}");
        }
        let (_, described) = built(&redis("redis://:secret@127.0.0.1:1")).unwrap();
        assert_eq!(described, "redis (single, redis://:***@127.0.0.1:1)");
    }

    #[test]
    fn a_wrong_type_is_an_error() {
        let mut r = redis("h:1");
        r.kind = "ring".into();
        assert!(built(&r).unwrap_err().starts_with("REDIS_TYPE="));
        r.kind = "sentinel".into();
        assert!(built(&r).is_err());
    }

    /// The reference's `settings.go` (`RedisTlsConfig`) reads the TLS files only with
    /// `REDIS_TLS`: without it they are not read (and logged as ignored by the settings).
    #[test]
    fn tls_files_are_read_with_tls_only() {
        let mut r = redis("h:1");
        r.tls_skip_hostname = true;
        r.tls_cacert = "/nonexistent/ca.pem".into();
        assert!(built(&r).is_ok());
        r.tls_cacert = String::new();
        r.tls = true;
        r.tls_client_cert = "/c.pem".into();
        let e = built(&r).unwrap_err();
        assert_eq!(
            e,
            "REDIS_TLS_CLIENT_CERT is set without REDIS_TLS_CLIENT_KEY"
        );
        r.tls_client_cert = String::new();
        r.tls_cacert = "/nonexistent/ca.pem".into();
        let e = built(&r).unwrap_err();
        assert!(
            e.starts_with("REDIS_TLS_CACERT=\"/nonexistent/ca.pem\": cannot read"),
            "{e}"
        );
    }

    /// The reference's `src/settings/settings.go` reads `REDIS_POOL_SIZE` (default 10) and
    /// `driver_impl.go` makes its pool that size; here it is the store's pool's `max_size`.
    #[test]
    fn the_pool_size_reaches_the_pool() {
        let mut r = redis("h:1");
        r.pool_size = 7;
        let (store, _) = built(&r).unwrap();
        let debug = format!("{store:?}");
        assert!(debug.contains("max_size: 7"), "{debug}");
    }
}
