//! The CLI's only unsafe code: calls into the C library for its signals.

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

/// On SIGINT or SIGTERM, removes the temporary files of writes in progress
/// (`nimble_graph::files::remove_temporaries`) and exits with 128 plus the signal's number, as
/// the default action's status reads. The two signals are blocked in every thread (threads
/// started later inherit that), and one thread waits for them: it runs ordinary code, not a
/// signal handler. Call first in `main`, before any other thread exists.
pub fn clean_up_on_interrupt() {
    #[cfg(unix)]
    {
        // SAFETY: `sigemptyset`/`sigaddset` initialize a local `sigset_t` we own; `pthread_sigmask`
        // only changes this thread's mask (before any other thread exists, so every later thread
        // inherits it), and reads the set, which outlives the call.
        let set = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return; // the signals keep their default action
            }
            set
        };
        let spawned = std::thread::Builder::new().name("signals".into()).spawn(move || {
            let mut signal: libc::c_int = 0;
            // SAFETY: `sigwait` reads the set (a copy this thread owns) and writes the signal's
            // number into `signal`, a local it may write.
            if unsafe { libc::sigwait(&set, &mut signal) } == 0 {
                nimble_graph::files::remove_temporaries();
                std::process::exit(128 + signal);
            }
        });
        if spawned.is_err() {
            // No thread to wait for them: unblock, so the signals still end the process.
            // SAFETY: as above, this thread's own mask.
            unsafe {
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            }
        }
    }
}
