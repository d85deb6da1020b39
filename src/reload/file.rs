//! Reading a configuration file without trusting it: only a regular file is read, opening it
//! never waits (a named pipe swapped in has no writer), and no more than its kind's limit is
//! read. A [`Source`](super::Source) that reads files reads them with [`read_file`], so that a
//! read is bounded and never waits: the watcher and every caller of
//! [`reload`](super::Reloaded::reload) read on their own thread, without a lock.

use std::fs::{File, FileType};
use std::io::Read;
use std::path::Path;

use crate::error::{ConfigError, ConfigErrorKind};

/// A kind of configuration file: what messages call it and how large it may be.
///
/// ```
/// use tollgate::reload::FileKind;
///
/// const GREETING: FileKind =
///     FileKind::new("greeting file", 4096).with_note("(4 KiB); a greeting is one line");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileKind {
    name: &'static str,
    max_bytes: u64,
    note: &'static str,
}

impl FileKind {
    /// Files called `name` in messages (`rules file`), of at most `max_bytes` bytes each.
    #[must_use]
    pub const fn new(name: &'static str, max_bytes: u64) -> Self {
        Self {
            name,
            max_bytes,
            note: "",
        }
    }

    /// Says `note` after the limit when a file is over it: where the limit is written, what
    /// size is usual.
    #[must_use]
    pub const fn with_note(mut self, note: &'static str) -> Self {
        self.note = note;
        self
    }

    /// The most bytes read from one file of this kind.
    #[must_use]
    pub const fn max_bytes(&self) -> u64 {
        self.max_bytes
    }
}

/// Reads the file of this `kind` at `path` (following symlinks): a regular file of at most
/// [`kind.max_bytes()`](FileKind::max_bytes), or a [`ConfigError`] (of kind
/// [`RulesFile`](ConfigErrorKind::RulesFile)) that names the file and says why not.
///
/// It never waits on what the path leads to: a named pipe, a socket, a device or a directory
/// is refused before it is opened, and again after (the path may have been swapped in
/// between), and opening does not wait for a pipe's writer. At most `max_bytes` plus one bytes
/// are read, whatever size the file reports, so `/dev/zero` or a file that keeps growing
/// costs no more than the limit.
pub fn read_file(path: &Path, kind: &FileKind) -> Result<Vec<u8>, ConfigError> {
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
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > max {
        let note = match kind.note {
            "" => String::new(),
            note => format!(" {note}"),
        };
        return Err(fail(format!(
            "it is larger than the limit of {max} bytes{note}"
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
