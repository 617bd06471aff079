//! What the GPU test binaries share: one lock around the GPU, and the skip-or-fail rule.

use std::sync::Mutex;

/// The tests share one GPU and its allocator statistics; capture in global mode also forbids
/// other threads' allocations. So they run one at a time.
static GPU: Mutex<()> = Mutex::new(());

/// The GPU, locked, with cuDNN's benchmark mode on; `None` (after a notice) without a CUDA
/// device, unless `NIMBLE_REQUIRE_GPU=1`, which makes a missing device a failure.
pub fn gpu() -> Option<std::sync::MutexGuard<'static, ()>> {
    if nimble_torch::cuda_available() {
        let guard = GPU.lock().unwrap_or_else(|e| e.into_inner());
        tch::Cuda::cudnn_set_benchmark(true);
        return Some(guard);
    }
    if std::env::var("NIMBLE_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("NIMBLE_REQUIRE_GPU=1 but libtorch sees no CUDA device");
    }
    eprintln!("notice: no CUDA device; skipping this GPU test (set NIMBLE_REQUIRE_GPU=1 to fail instead)");
    None
}
