//! The store the settings name: Redis (standalone, Sentinel or Cluster) at `REDIS_URL` in the
//! reference's forms, or memory without it.

use tollgate::store::RedisStore;

use crate::settings::Redis;

/// The Redis store the settings name (`None`: the memory store), and a description of it for
/// the log (credentials left out).
pub(crate) fn from_settings(redis: Option<&Redis>) -> Result<(Option<RedisStore>, String), String> {
    let Some(r) = redis else {
        return Ok((None, "memory (this instance only)".into()));
    };
    let fail = |e: tollgate::ConfigError| format!("REDIS_URL: {e}");
    let store = match r.kind.as_str() {
        "single" => RedisStore::from_url(&url(r, r.url.trim(), &r.auth)).map_err(fail)?,
        "cluster" => {
            let nodes: Vec<String> = (r.url.split(',').map(str::trim))
                .filter(|n| !n.is_empty())
                .map(|n| url(r, n, &r.auth))
                .collect();
            RedisStore::cluster(&nodes).map_err(fail)?
        }
        "sentinel" => {
            // The reference's form: `master,sentinel1:port,sentinel2:port`.
            let mut parts = r.url.split(',').map(str::trim).filter(|p| !p.is_empty());
            let master = parts.next().unwrap_or_default().to_owned();
            let sentinels: Vec<String> = parts.map(|s| url(r, s, &r.sentinel_auth)).collect();
            if sentinels.is_empty() {
                return Err(
                    "REDIS_URL: with REDIS_TYPE=sentinel, give the master's name then the \
                     sentinels: mymaster,host1:26379,host2:26379"
                        .into(),
                );
            }
            RedisStore::sentinel(&sentinels, &master).map_err(fail)?
        }
        other => {
            return Err(format!(
                "REDIS_TYPE={other:?}: expected single, sentinel or cluster"
            ))
        }
    };
    let store = match r.prefix.as_str() {
        "" => store,
        prefix => store.prefix(prefix),
    };
    Ok((
        Some(store),
        format!("redis ({}, {})", r.kind, redacted(&r.url)),
    ))
}

/// One address as a URL: kept as given when it is one; else `host:port` (or, with
/// `REDIS_SOCKET_TYPE=unix`, a socket path) with `REDIS_AUTH` and `REDIS_TLS` applied.
fn url(r: &Redis, address: &str, auth: &str) -> String {
    if address.contains("://") {
        return address.to_owned();
    }
    if r.socket_type == "unix" && address.starts_with('/') {
        return format!("redis+unix://{address}");
    }
    let scheme = if r.tls { "rediss" } else { "redis" };
    let credentials = match auth.split_once(':') {
        _ if auth.is_empty() => String::new(),
        Some((user, password)) => format!("{}:{}@", encode(user), encode(password)),
        None => format!(":{}@", encode(auth)),
    };
    let insecure = if r.tls && r.tls_insecure {
        "/#insecure"
    } else {
        ""
    };
    format!("{scheme}://{credentials}{address}{insecure}")
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

/// The URL list with any `user:password@` left out.
fn redacted(urls: &str) -> String {
    (urls.split(','))
        .map(|u| match u.rsplit_once('@') {
            Some((before, host)) => match before.split_once("://") {
                Some((scheme, _)) => format!("{scheme}://***@{host}"),
                None => format!("***@{host}"),
            },
            None => u.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
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
            tls_insecure: false,
            prefix: String::new(),
        }
    }

    #[test]
    fn the_references_address_forms_become_urls() {
        let mut r = redis("redis:6379");
        assert_eq!(url(&r, "redis:6379", ""), "redis://redis:6379");
        r.tls = true;
        assert_eq!(url(&r, "h:6380", "p@ss"), "rediss://:p%40ss@h:6380");
        r.tls_insecure = true;
        assert_eq!(
            url(&r, "h:6380", "user:pw"),
            "rediss://user:pw@h:6380/#insecure"
        );
        r.socket_type = "unix".into();
        assert_eq!(
            url(&r, "/var/run/redis.sock", ""),
            "redis+unix:///var/run/redis.sock"
        );
        assert_eq!(url(&r, "redis://x:1", "ignored"), "redis://x:1");
    }

    #[test]
    fn credentials_never_reach_the_log() {
        assert_eq!(redacted("redis://u:p@h:1,h2:2"), "redis://***@h:1,h2:2");
        let (_, described) = from_settings(Some(&redis("redis://:secret@127.0.0.1:1"))).unwrap();
        assert!(!described.contains("secret"), "{described}");
    }

    #[test]
    fn a_wrong_type_is_an_error() {
        let mut r = redis("h:1");
        r.kind = "ring".into();
        assert!(from_settings(Some(&r))
            .unwrap_err()
            .starts_with("REDIS_TYPE="));
        r.kind = "sentinel".into();
        assert!(from_settings(Some(&r)).is_err());
    }
}
