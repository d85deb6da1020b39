//! The built `tollgate-rls`'s JSON logs and debug port, as the reference's: logrus's JSON
//! (`src/service_cmd/runner/runner.go`: `@timestamp`, `@message`, lowercase `level`), and the
//! debug port's index, `/stats` and `/debug/pprof/` (`src/server/server_impl.go`, `newServer`).

mod support;

use support::{get_text, http, Rls, Runtime};

fn runtime(test: &str) -> Runtime {
    Runtime::with(test, &["runtime/current/ratelimit/config/basic.yaml"])
}

/// Each line a JSON object with logrus's keys (`FieldMap`: `@timestamp`, `@message`) and level
/// names (`warning`), the time in RFC 3339 with nanoseconds, UTC.
#[test]
fn json_logs_are_logruss() {
    let runtime = runtime("json-logs");
    let rls = Rls::start(
        &runtime,
        &[
            ("LOG_FORMAT", "json"),
            ("LOG_LEVEL", "info"),
            ("LOCAL_CACHE_SIZE_IN_BYTES", "1000"),
        ],
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !rls.stderr().contains("configuration from") && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let stderr = rls.stderr();
    let lines: Vec<serde_json::Value> = (stderr.lines())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!lines.is_empty(), "{stderr}");
    for line in &lines {
        let object = line.as_object().unwrap();
        assert!(object["@message"].is_string(), "{line}");
        let time = object["@timestamp"].as_str().unwrap();
        assert!(
            time.len() >= 20 && time.ends_with('Z') && &time[10..11] == "T",
            "{time}"
        );
        let level = object["level"].as_str().unwrap();
        assert!(
            ["info", "warning", "error", "debug"].contains(&level),
            "{line}"
        );
        assert!(!object.contains_key("fields") && !object.contains_key("target"));
    }
    let ignored = lines.iter().find(|l| {
        l["@message"]
            .as_str()
            .is_some_and(|m| m.starts_with("LOCAL_CACHE_SIZE_IN_BYTES is ignored"))
    });
    assert_eq!(ignored.unwrap()["level"], "warning", "{stderr}");
}

/// The reference's debug port lists its endpoints at `/`, prints its statistics at `/stats`
/// and serves `/debug/pprof/`; tollgate-rls has no Go profiles: `/debug/pprof/profile` and
/// `/debug/pprof/trace` answer 501 saying how to profile it.
#[tokio::test]
async fn the_debug_port_has_the_references_endpoints() {
    let runtime = runtime("debug-port");
    let rls = Rls::start(&runtime, &[]);
    let base = format!("http://{}", rls.debug);
    let index = get_text(format!("{base}/")).await;
    assert_eq!(
        index,
        "/debug/pprof/: root of various pprof endpoints. hit for help.\n\
         /debug/pprof/profile: CPU profiling endpoint\n\
         /debug/pprof/trace: trace endpoint\n\
         /rlconfig: print out the currently loaded configuration for debugging\n\
         /stats: print out stats\n"
    );
    let stats = get_text(format!("{base}/stats")).await;
    assert!(stats.starts_with("cmdline: [\""), "{stats}");
    assert!(
        stats.contains("\nratelimit_service_config_load_success: 1\n"),
        "{stats}"
    );
    let pprof = http()
        .get(format!("{base}/debug/pprof/"))
        .send()
        .await
        .unwrap();
    assert_eq!(pprof.status(), 200);
    assert!(pprof.text().await.unwrap().contains("cmdline"));
    for path in ["profile", "trace"] {
        let answer = http()
            .get(format!("{base}/debug/pprof/{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 501, "{path}");
        assert!(answer.text().await.unwrap().contains("perf"));
    }
    assert!(get_text(format!("{base}/rlconfig")).await.contains("basic"));
}
