//! Running Rust with the GIL released: the one place this crate asserts `Send` for what it
//! hands to `allow_threads`.

use pyo3::Python;

/// A value `allow_threads` must see as `Send`.
struct OnThisThread<T>(T);

// SAFETY: `allow_threads` runs its closure on the calling thread and returns before this
// function does, so neither the closure nor its result ever crosses a thread. (It asks for
// `Send` because other Python threads run meanwhile; what the closure borrows is a `Native`,
// which PyO3 keeps mutably borrowed for the call and refuses to other threads, `unsendable`.)
unsafe impl<T> Send for OnThisThread<T> {}

/// Runs `f` on this thread with the GIL released: libtorch's autograd engine refuses to run
/// while the calling thread holds it, and a long `prepare` should not stop other Python threads.
pub fn without_gil<T>(py: Python<'_>, f: impl FnOnce() -> T) -> T {
    let job = OnThisThread(f);
    let result = py.allow_threads(move || {
        // The whole wrapper moves in (a closure naming only `job.0` would capture the field).
        let job = job;
        OnThisThread((job.0)())
    });
    result.0
}
