//! Every file the project reads or writes goes through here: reads bounded, writes into the
//! path the user named without clobbering what it points to.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{GraphError, Result};

/// The largest file read, bytes (64 MiB). A task graph of [`crate::MAX_NODES`] nodes with shapes
/// and durations takes about 15 MB.
pub const MAX_GRAPH_FILE_BYTES: u64 = 64 << 20;

/// Reads a UTF-8 text file of at most [`MAX_GRAPH_FILE_BYTES`], with that bound: a larger file,
/// or an endless one such as `/dev/zero`, is an error once the bound is passed. A name ending
/// in `.gz` is decompressed, and the bound holds for the text it holds (so a small file that
/// inflates without end is an error too).
pub fn read_text(path: &Path) -> Result<String> {
    let io = |error| GraphError::Io { path: path.display().to_string(), error };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") { Box::new(flate2::read::GzDecoder::new(file)) } else { Box::new(file) };
    reader.take(MAX_GRAPH_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidInput || e.kind() == std::io::ErrorKind::InvalidData {
            io(std::io::Error::new(e.kind(), format!("{e}; expected a gzip-compressed JSON file (the name ends in .gz)")))
        } else {
            io(e)
        }
    })?;
    if bytes.len() as u64 > MAX_GRAPH_FILE_BYTES {
        return Err(GraphError::FileTooLarge { path: path.display().to_string(), limit_mib: MAX_GRAPH_FILE_BYTES >> 20 });
    }
    String::from_utf8(bytes).map_err(|e| {
        let valid = e.utf8_error().valid_up_to();
        io(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("not UTF-8 text (byte {valid} is not valid UTF-8); expected JSON")))
    })
}

/// The temporary files being written now (between their creation and their rename).
static IN_FLIGHT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Removes every temporary file a write in progress holds: what a program interrupted by a
/// signal calls before it exits (nimble-bench does, on SIGINT and SIGTERM), so that no
/// `.NAME.PID.tmp` is left beside its target. Writes in progress then fail.
pub fn remove_temporaries() {
    let in_flight = IN_FLIGHT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for temporary in in_flight.iter() {
        let _ = std::fs::remove_file(temporary);
    }
}

/// Writes `bytes` to the file the user named by `path`.
///
/// * A regular file (or a name not yet taken) is replaced atomically: the bytes go to a
///   temporary file in its directory, which is flushed to disk (`fsync`) and renamed over it,
///   so an interrupted write never leaves it half-written; the temporary file is removed on any
///   failure, and an existing file's permissions are kept.
/// * A symbolic link is followed: its target is written (as above), the link stays a link.
/// * Anything else that exists (a device such as `/dev/null` or `/dev/stdout`, a FIFO) is
///   written directly: it cannot be replaced by a rename, nor should it be.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let io = |error| GraphError::Io { path: path.display().to_string(), error };
    match std::fs::metadata(path) {
        Ok(metadata) if !metadata.is_file() && !metadata.is_dir() => {
            let mut file = std::fs::OpenOptions::new().write(true).truncate(true).open(path).map_err(io)?;
            return file.write_all(bytes).and_then(|()| file.flush()).map_err(io);
        }
        _ => {}
    }
    let target = link_target(path).map_err(io)?;
    let file_name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let temporary = target.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    IN_FLIGHT.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(temporary.clone());
    let written = (|| -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&temporary)?;
        if let Ok(existing) = std::fs::metadata(&target) {
            file.set_permissions(existing.permissions())?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&temporary, &target)
    })();
    IN_FLIGHT.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).retain(|t| t != &temporary);
    if let Err(error) = written {
        let _ = std::fs::remove_file(&temporary);
        return Err(io(error));
    }
    // The rename is durable once the directory is: best effort (not every file system allows it).
    if let Some(directory) = target.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(directory) = std::fs::File::open(directory) {
            let _ = directory.sync_all();
        }
    }
    Ok(())
}

/// The path a chain of symbolic links at `path` ends at (`path` itself when it is no link),
/// also when the last target does not exist yet.
fn link_target(path: &Path) -> std::io::Result<PathBuf> {
    let mut current = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&current) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                let next = std::fs::read_link(&current)?;
                current = match current.parent() {
                    Some(parent) if next.is_relative() => parent.join(next),
                    _ => next,
                };
            }
            _ => return Ok(current),
        }
    }
    Err(std::io::Error::other("too many levels of symbolic links"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;

    /// Held by every test that writes: `remove_temporaries` removes the temporaries of every write
    /// in the process, so a test calling it must not run beside a write in another test's thread.
    static WRITES: Mutex<()> = Mutex::new(());

    fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
        WRITES.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nimble-files-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".tmp")).collect()
    }

    #[test]
    fn a_regular_file_is_replaced_and_keeps_its_permissions() {
        let _serial = one_at_a_time();
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("regular");
        let path = dir.join("out.json");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomically(&path, b"new").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        assert!(leftovers(&dir).is_empty());
    }

    #[test]
    fn a_symbolic_link_is_followed_and_stays_a_link() {
        let _serial = one_at_a_time();
        let dir = scratch("link");
        let target = dir.join("target.json");
        std::fs::write(&target, "old").unwrap();
        let link = dir.join("link.json");
        std::os::unix::fs::symlink("target.json", &link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "new");
        // A dangling link gets its target made.
        let dangling = dir.join("dangling.json");
        std::os::unix::fs::symlink("made.json", &dangling).unwrap();
        write_atomically(&dangling, b"made").unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("made.json")).unwrap(), "made");
        assert!(leftovers(&dir).is_empty());
    }

    #[test]
    fn devices_and_fifos_are_written_directly() {
        let _serial = one_at_a_time();
        write_atomically(Path::new("/dev/null"), b"gone").unwrap();
        assert!(std::fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        let dir = scratch("fifo");
        let fifo = dir.join("pipe");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let reader = { let fifo = fifo.clone(); std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap()) };
        write_atomically(&fifo, b"through").unwrap();
        assert_eq!(reader.join().unwrap(), "through");
        assert!(std::fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    }

    #[test]
    fn temporaries_of_writes_in_progress_can_be_removed() {
        let _serial = one_at_a_time();
        let dir = scratch("in-flight");
        let temporary = dir.join(".target.json.1.tmp");
        std::fs::write(&temporary, "partial").unwrap();
        IN_FLIGHT.lock().unwrap().push(temporary.clone());
        remove_temporaries();
        IN_FLIGHT.lock().unwrap().retain(|t| t != &temporary);
        assert!(!temporary.exists());
        write_atomically(&dir.join("target.json"), b"done").unwrap();
        assert!(IN_FLIGHT.lock().unwrap().iter().all(|t| !t.starts_with(&dir)), "a finished write is no longer in flight");
    }

    #[test]
    fn a_failed_write_leaves_no_temporary_file() {
        let _serial = one_at_a_time();
        let dir = scratch("failed");
        // A directory where the file should be: the rename fails after the temporary is written.
        std::fs::create_dir(dir.join("taken")).unwrap();
        std::fs::write(dir.join("taken").join("inside"), "x").unwrap();
        assert!(write_atomically(&dir.join("taken"), b"data").is_err());
        assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
    }
}
