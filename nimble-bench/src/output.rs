//! Writing results: stdout that tolerates a closed pipe, and files written atomically.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

/// Prints `text` (plus a newline) to stdout. A reader that went away (`| head`) is not an
/// error: the command has said what it had to say.
pub fn emit(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match writeln!(stdout, "{text}").and_then(|()| stdout.flush()) {
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to stdout"),
    }
}

/// Prints a JSON value on one line.
pub fn emit_json(value: &serde_json::Value) -> Result<()> {
    emit(&serde_json::to_string(value).context("serializing JSON")?)
}

/// Writes `text` to `path` through a temporary file, so a failure leaves no partial file.
pub fn write_file(path: &Path, text: &str) -> Result<()> {
    nimble_graph::json::write_atomically(path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

/// Writes `bytes` to `path` as `write_file` writes text.
pub fn write_bytes(path: &Path, bytes: &[u8]) -> Result<()> {
    nimble_graph::json::write_atomically(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// A progress bar on stderr for a run of `len` steps (drawn only on a terminal).
#[cfg(feature = "torch")]
pub fn progress(len: usize, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len as u64);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg} ({elapsed})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar
}

/// Prints `line` on stderr above the bar (also when the bar is hidden, as in a log).
#[cfg(feature = "torch")]
pub fn note(bar: &indicatif::ProgressBar, line: &str) {
    bar.suspend(|| eprintln!("{line}"));
}
