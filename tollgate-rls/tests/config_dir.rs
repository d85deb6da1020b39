//! The built `tollgate-rls`'s configuration directory read as the reference's runtime loader
//! reads it (`src/provider/file_provider.go` over lyft/goruntime's `loader`): a directory that
//! is missing at start is an empty configuration until it appears; an empty
//! `RUNTIME_SUBDIRECTORY` reads nothing; hidden directories are read unless
//! `RUNTIME_IGNOREDOTFILES`.

mod support;

use std::time::Duration;

use support::{ask, eventually, request, Rls, Runtime};
use tollgate_rls::proto::rate_limit_response::Code;

const EDGE: &str = "\
domain: edge
descriptors:
  - key: user
    rate_limit: { unit: hour, requests_per_unit: 5 }
";

/// Whether `user` of domain `edge` is limited (an unknown domain is OK without a limit).
async fn limited(rls: &Rls) -> bool {
    let mut client = rls.client().await;
    let answer = ask(&mut client, request("edge", &[&[("user", "a")]])).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    answer.statuses[0].current_limit.is_some()
}

/// goruntime's walk of a directory that does not exist finds no file (`loader.go`,
/// `walkDirectoryCallback` logs the error and goes on), so the reference serves an empty
/// configuration; once the directory appears with its files, they load.
#[tokio::test]
async fn a_missing_directory_is_an_empty_configuration_until_it_appears() {
    let runtime = Runtime::new("missing-dir");
    std::fs::remove_dir_all(runtime.config()).unwrap();
    let rls = Rls::start(&runtime, &[]);
    assert!(rls.stderr().contains("does not exist"), "{}", rls.stderr());
    assert!(!limited(&rls).await, "an unknown domain");
    std::fs::create_dir_all(runtime.config()).unwrap();
    runtime.write("edge.yaml", EDGE);
    let loaded = eventually(Duration::from_secs(5), || limited(&rls)).await;
    assert!(loaded, "the files load once the directory is there");
}

/// With `RUNTIME_WATCH_ROOT` (default true) the reference gives goruntime `RUNTIME_ROOT` and
/// `RUNTIME_SUBDIRECTORY`, and an empty subdirectory makes `loader.New2` its nil loader ("no
/// runtime configuration. using nil loader."): no file is read. With
/// `RUNTIME_WATCH_ROOT=false` the files of `$RUNTIME_ROOT/$RUNTIME_APPDIRECTORY` are.
#[tokio::test]
async fn an_empty_subdirectory_reads_nothing_as_the_reference() {
    let runtime = Runtime::new("empty-subdirectory");
    let root_config = runtime.root.join("config");
    std::fs::create_dir_all(&root_config).unwrap();
    std::fs::write(root_config.join("edge.yaml"), EDGE).unwrap();
    let rls = Rls::start(&runtime, &[("RUNTIME_SUBDIRECTORY", "")]);
    assert!(!limited(&rls).await, "no file read");
    assert!(
        rls.stderr().contains("RUNTIME_SUBDIRECTORY is empty"),
        "{}",
        rls.stderr()
    );
    let rls = Rls::start(
        &runtime,
        &[
            ("RUNTIME_SUBDIRECTORY", ""),
            ("RUNTIME_WATCH_ROOT", "false"),
        ],
    );
    assert!(limited(&rls).await, "$RUNTIME_ROOT/config read");
}

/// goruntime skips a hidden directory only with `IgnoreDotFiles` (`walkDirectoryCallback`:
/// `if l.ignoreDotfiles && info.IsDir() && strings.HasPrefix(info.Name(), ".")`).
#[tokio::test]
async fn hidden_directories_are_read_unless_dot_files_are_ignored() {
    let runtime = Runtime::new("hidden-dir");
    let hidden = runtime.config().join(".team");
    std::fs::create_dir_all(&hidden).unwrap();
    std::fs::write(hidden.join("edge.yaml"), EDGE).unwrap();
    let rls = Rls::start(&runtime, &[]);
    assert!(limited(&rls).await, "read from the hidden directory");
    let rls = Rls::start(&runtime, &[("RUNTIME_IGNOREDOTFILES", "true")]);
    assert!(!limited(&rls).await, "skipped with RUNTIME_IGNOREDOTFILES");
}
