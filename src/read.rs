//! Reading a configuration file (the rules file, a file of the `rls` configuration directory)
//! without trusting it: only a regular file is read, opening it never waits (a named pipe
//! swapped in has no writer), and no more than its kind's limit is read.

use std::fs::{File, FileType};
use std::io::Read;
use std::path::Path;

use crate::error::{ConfigError, ConfigErrorKind};

/// The largest rules file tollgate reads, and the largest file of the `rls` configuration
/// directory: 4 MiB.
///
/// A rules file is a few kilobytes, and the parser reads 2 MB in well under a second, so
/// this only stops a mistake or an attack: a path pointed at `/dev/zero`, a log file, a file
/// that keeps growing. The limit holds while reading (at most this many bytes plus one are
/// read), whatever size the file reports. A larger file is refused with an error that names
/// the file and the limit: a [`ConfigError`] at start-up, a logged failure on reload that
/// keeps the rules in force.
pub const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// A kind of configuration file: what messages call it and how large it may be.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FileKind {
    /// Its name in messages: `rules file`.
    pub(crate) name: &'static str,
    /// The most bytes read from one file.
    pub(crate) max_bytes: u64,
    /// Said after the limit when a file is over it: where the limit is written, what is usual.
    pub(crate) over_the_limit: &'static str,
}

/// The rules file of [`RateLimitLayer::from_rules_file`](crate::RateLimitLayer::from_rules_file).
pub(crate) const RULES_FILE: FileKind = FileKind {
    name: "rules file",
    max_bytes: MAX_FILE_BYTES,
    over_the_limit: "(4 MiB, tollgate::rules::MAX_FILE_BYTES); a rules file is a few kilobytes",
};

/// Reads the rules file at `path` (following symlinks): a regular file of at most
/// [`MAX_FILE_BYTES`], or an error that names the file and says why not.
pub(crate) fn read_rules_file(path: &Path) -> Result<Vec<u8>, ConfigError> {
    read_config_file(path, &RULES_FILE)
}

/// Reads the file of this `kind` at `path` (following symlinks): a regular file of at most
/// `kind.max_bytes`, or an error that names the file and says why not.
pub(crate) fn read_config_file(path: &Path, kind: &FileKind) -> Result<Vec<u8>, ConfigError> {
    let fail = |why: String| {
        ConfigError::with_kind(
            ConfigErrorKind::RulesFile,
            format!("cannot read {} {}: {why}", kind.name, path.display()),
        )
    };
    // Checked before opening: opening a device or a pipe may itself wait or act.
    let metadata = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
    not_a_regular_file(metadata.file_type()).map_or(Ok(()), |what| Err(fail(what)))?;
    let file = open_without_waiting(path).map_err(|e| fail(e.to_string()))?;
    // And again on what was opened: the path may have been swapped since.
    let metadata = file.metadata().map_err(|e| fail(e.to_string()))?;
    not_a_regular_file(metadata.file_type()).map_or(Ok(()), |what| Err(fail(what)))?;
    let max = kind.max_bytes;
    let expected = metadata.len().min(max);
    let mut bytes = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > max {
        return Err(fail(format!(
            "it is larger than the limit of {max} bytes {}",
            kind.over_the_limit
        )));
    }
    Ok(bytes)
}

/// Why a file of this type is not read, or `None` for a regular file.
fn not_a_regular_file(file_type: FileType) -> Option<String> {
    if file_type.is_file() {
        return None;
    }
    let what = if file_type.is_dir() {
        "a directory"
    } else {
        special_file(file_type)
    };
    Some(format!(
        "it is {what}, not a regular file (only a regular file, or a symlink to one, is read)"
    ))
}

#[cfg(unix)]
fn special_file(file_type: FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_fifo() {
        "a named pipe (FIFO)"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_file(_: FileType) -> &'static str {
    "a special file"
}

/// Opens `path` for reading. On unix with `O_NONBLOCK`, so that a named pipe swapped in after
/// the check is opened at once (with no writer to wait for) and refused by the second check;
/// reads of a regular file are not affected by the flag.
#[cfg(unix)]
fn open_without_waiting(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

#[cfg(not(unix))]
fn open_without_waiting(path: &Path) -> std::io::Result<File> {
    File::open(path)
}
