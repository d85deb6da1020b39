//! The command line of the built `tollgate-rls`: `--help` and `-h` print the usage (the groups of
//! settings and `check DIR`) and exit 0; anything else than serving, `check` and help is refused
//! with the usage and status 2, instead of starting a server. (The reference's `ratelimit`
//! binary, `src/service_cmd/main.go`, takes no argument.)

mod support;

use std::process::{Command, Output};

use support::BIN;

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_clear()
        .output()
        .expect("run tollgate-rls")
}

#[test]
fn help_prints_the_usage_and_exits_0() {
    for flag in ["--help", "-h"] {
        let out = run(&[flag]);
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let usage = String::from_utf8_lossy(&out.stdout);
        assert!(usage.contains("tollgate-rls check"), "{usage}");
        for group in [
            "listeners",
            "configuration",
            "Redis",
            "statistics",
            "tracing",
        ] {
            assert!(usage.contains(group), "{group}: {usage}");
        }
        assert!(usage.contains("REDIS_URL") && usage.contains("LOG_FORMAT"));
        assert!(out.stderr.is_empty());
    }
    let out = run(&["check", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: tollgate-rls check"));
}

#[test]
fn an_unknown_argument_exits_2_with_the_usage() {
    for arg in ["--port", "serve", "-v"] {
        let out = run(&[arg]);
        assert_eq!(out.status.code(), Some(2), "{arg}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with(&format!("tollgate-rls: unknown argument {arg:?}")),
            "{stderr}"
        );
        assert!(stderr.contains("tollgate-rls check"), "{stderr}");
        assert!(out.stdout.is_empty(), "nothing served");
    }
}
