//! The CLI's only unsafe code: one call into the C library.

/// Restores SIGPIPE's default action, so that `nimble-bench ... | head` ends quietly when the
/// reader closes the pipe, as Unix tools do. Rust's runtime ignores SIGPIPE, which turns that
/// write into an error, and `println!` panics on it.
pub fn die_quietly_on_a_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: `signal` with SIGPIPE and SIG_DFL only resets how this process handles that signal;
    // it is called first in `main`, before any other thread exists or any handler was installed.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
