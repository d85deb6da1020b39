//! How the process runs: `LOG_LEVEL` and `LOG_FORMAT` (the reference's), and
//! `TOKIO_WORKER_THREADS` (tokio's own name).

use super::error::SettingsError;
use super::vars::Vars;

/// The logs and the runtime's threads.
#[derive(Debug, Clone)]
pub(crate) struct Process {
    /// `LOG_LEVEL` (the reference's: trace, debug, info, warn, error; default warn) as a
    /// level of `tracing`: `trace`, `debug`, `info`, `warn` or `error`.
    pub(crate) log_level: &'static str,
    /// `LOG_FORMAT=json`: one JSON object a line (any other value: text, as the reference).
    pub(crate) log_json: bool,
    /// `TOKIO_WORKER_THREADS`: the async runtime's worker threads; unset, as
    /// `serve/runtime.rs` chooses from the cores this process may use.
    pub(crate) worker_threads: Option<usize>,
}

/// The logs and threads `vars` ask for.
pub(crate) fn read(vars: &Vars<'_>) -> Result<Process, SettingsError> {
    let log_level = match vars.get("LOG_LEVEL", "WARN").to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        other => {
            let expected = "expected debug, info, warn or error";
            return Err(SettingsError::invalid("LOG_LEVEL", other, expected));
        }
    };
    // The reference's runner.go: JSON when `strings.ToLower(LOG_FORMAT) == "json"`, else text.
    let log_json = vars.get("LOG_FORMAT", "text").eq_ignore_ascii_case("json");
    let worker_threads = vars.parsed(
        "TOKIO_WORKER_THREADS",
        None,
        |v| v.parse::<usize>().ok().filter(|n| *n > 0).map(Some),
        "expected a number of threads from 1",
    )?;
    Ok(Process {
        log_level,
        log_json,
        worker_threads,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read_from(vars: &[(&str, &str)]) -> Result<Process, String> {
        let map: HashMap<&str, &str> = vars.iter().copied().collect();
        let lookup = |name: &str| map.get(name).map(|v| (*v).to_owned());
        read(&Vars::new(&lookup)).map_err(|e| e.to_string())
    }

    #[test]
    fn worker_threads_from_tokios_variable() {
        assert_eq!(read_from(&[]).unwrap().worker_threads, None);
        let s = read_from(&[("TOKIO_WORKER_THREADS", "1")]).unwrap();
        assert_eq!(s.worker_threads, Some(1));
        for bad in ["0", "-1", "two"] {
            assert!(read_from(&[("TOKIO_WORKER_THREADS", bad)])
                .unwrap_err()
                .starts_with("TOKIO_WORKER_THREADS="));
        }
    }

    #[test]
    fn the_references_log_levels() {
        assert_eq!(read_from(&[]).unwrap().log_level, "warn");
        for (given, level) in [("DEBUG", "debug"), ("Warning", "warn"), ("fatal", "error")] {
            assert_eq!(read_from(&[("LOG_LEVEL", given)]).unwrap().log_level, level);
        }
        assert_eq!(
            read_from(&[("LOG_LEVEL", "Chatty")]).unwrap_err(),
            "LOG_LEVEL=\"chatty\": expected debug, info, warn or error"
        );
        assert!(read_from(&[("LOG_FORMAT", "JSON")]).unwrap().log_json);
    }

    /// The reference's `src/service_cmd/runner/runner.go` (lines 159-167): JSON for `json` in
    /// any case, text for anything else (`logfmt` included).
    #[test]
    fn any_other_log_format_is_text() {
        for text in ["text", "logfmt", "xml", ""] {
            assert!(
                !read_from(&[("LOG_FORMAT", text)]).unwrap().log_json,
                "{text}"
            );
        }
    }
}
