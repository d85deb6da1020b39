//! `tollgate-rls check [--merge-domains] [--ignore-dot-files] DIR`: validates a configuration
//! directory for CI, without serving (the reference's `config_check_cmd`, whose flags
//! `-config_dir DIR` and `-merge_domain_configs` are accepted too). It reads the directory as
//! the server does and names every file that does not load. Exit status: 0 when the server
//! would load the directory, 1 when not (as the server's own exit on a bad file), 2 for bad
//! arguments.

use std::process::ExitCode;

use tollgate_rls::{DotFiles, DuplicateDomains, RlsConfig};

const USAGE: &str = "usage: tollgate-rls check [--merge-domains] [--ignore-dot-files] DIR";

/// Runs the check with the arguments after `check`.
pub(crate) fn run(args: impl Iterator<Item = String>) -> ExitCode {
    let mut merge_domains = false;
    let mut ignore_dot_files = false;
    let mut dir = None;
    let mut args = args.peekable();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--merge-domains" | "-merge_domain_configs" | "--merge_domain_configs" => {
                merge_domains = true;
            }
            "--ignore-dot-files" => ignore_dot_files = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "-config_dir" | "--config_dir" | "--config-dir" if args.peek().is_some() => {
                dir = args.next();
            }
            other if other.starts_with("-config_dir=") || other.starts_with("--config_dir=") => {
                dir = other.split_once('=').map(|(_, d)| d.to_owned());
            }
            other if other.starts_with('-') || dir.is_some() => {
                eprintln!("tollgate-rls check: unexpected argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => dir = Some(arg),
        }
    }
    let Some(dir) = dir else {
        eprintln!("tollgate-rls check: no directory given\n{USAGE}");
        return ExitCode::from(2);
    };
    println!("checking the rate limit configuration in {dir}");
    let duplicates = match merge_domains {
        true => DuplicateDomains::Merge,
        false => DuplicateDomains::Refuse,
    };
    let dot_files = match ignore_dot_files {
        true => DotFiles::Ignore,
        false => DotFiles::Read,
    };
    let check = RlsConfig::check_dir(&dir, duplicates, dot_files);
    for skipped in &check.skipped {
        println!("warning: {skipped}");
    }
    for e in &check.errors {
        eprintln!("tollgate-rls check: {e}");
    }
    if check.is_ok() {
        println!("all {} configuration file(s) ok", check.files.len());
        ExitCode::SUCCESS
    } else {
        println!(
            "{} problem(s) in {} configuration file(s)",
            check.errors.len(),
            check.files.len()
        );
        ExitCode::FAILURE
    }
}
