//! The command line: no argument serves (configured by the environment, as the reference's
//! `ratelimit` binary takes no argument); `check …` validates a configuration directory;
//! `-h`/`--help` prints the usage, the groups of settings included. Anything else is refused
//! with the usage (status 2) rather than taken for a server to start.

use std::process::ExitCode;

/// What the usage says: the commands, the environment by group, the exit statuses.
pub(crate) const USAGE: &str = include_str!("usage.txt");

/// What the arguments ask for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// No argument: serve.
    Serve,
    /// `check …`: the arguments after `check`.
    Check(Vec<String>),
    /// `-h` or `--help`.
    Help,
    /// An argument that is none of these.
    Unknown(String),
}

/// The command `args` (without the program's name) ask for.
pub(crate) fn parse(mut args: impl Iterator<Item = String>) -> Command {
    match args.next() {
        None => Command::Serve,
        Some(first) => match first.as_str() {
            "check" => Command::Check(args.collect()),
            "-h" | "--help" | "-help" | "help" => Command::Help,
            _ => Command::Unknown(first),
        },
    }
}

/// Prints the usage on stdout (asked for: status 0).
pub(crate) fn help() -> ExitCode {
    print!("{USAGE}");
    ExitCode::SUCCESS
}

/// Refuses `arg` with the usage on stderr (status 2).
pub(crate) fn refuse(arg: &str) -> ExitCode {
    eprint!("tollgate-rls: unknown argument {arg:?}\n\n{USAGE}");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(args: &[&str]) -> Command {
        parse(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn serve_check_help_or_refuse() {
        assert_eq!(parsed(&[]), Command::Serve);
        assert_eq!(parsed(&["check", "/d"]), Command::Check(vec!["/d".into()]));
        assert_eq!(parsed(&["-h"]), Command::Help);
        assert_eq!(parsed(&["--help"]), Command::Help);
        assert_eq!(parsed(&["--port", "1"]), Command::Unknown("--port".into()));
        assert_eq!(parsed(&["serve"]), Command::Unknown("serve".into()));
    }

    #[test]
    fn the_usage_names_check_and_every_group() {
        assert!(USAGE.contains("tollgate-rls check"));
        for group in [
            "listeners",
            "store",
            "Redis",
            "statistics",
            "logs",
            "tracing",
        ] {
            assert!(USAGE.contains(&format!("\n  {group} ")), "{group}");
        }
    }
}
