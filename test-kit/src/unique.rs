//! Names of one test's own: key prefixes, temporary directories, rules files.

/// A unique key prefix per test, so tests can share one Redis.
pub fn unique_prefix(test: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}-{}-{}",
        std::process::id(),
        test,
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh, empty temporary directory for one test.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(unique_prefix(name));
    std::fs::create_dir_all(&dir).expect("temporary directory");
    dir
}

/// `text` in a file `rules.toml` of a temporary directory of its own.
pub fn rules_file(test: &str, text: impl AsRef<[u8]>) -> std::path::PathBuf {
    let path = temp_dir(test).join("rules.toml");
    std::fs::write(&path, text).expect("the rules file written");
    path
}
