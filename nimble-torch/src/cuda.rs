//! The CUDA device as the experiments see it: synchronizing, the caching allocator, timing with
//! events, and how outputs are compared.

use tch::Tensor;

use crate::error::Result;
use crate::ffi;

/// Bytes the CUDA caching allocator has handed out on `device` and not taken back.
pub fn cuda_allocated_bytes(device: usize) -> Result<u64> {
    ffi::cuda_allocated_bytes(device)
}

/// Returns the CUDA caching allocator's unused cached blocks to the driver (PyTorch's
/// `torch.cuda.empty_cache()`), so that what runs next allocates as in a fresh process.
pub fn cuda_empty_cache() -> Result<()> {
    ffi::cuda_empty_cache()
}

/// Lets float32 CUDA convolutions run in TF32 (`true`: libtorch's and PyTorch's default, as
/// `torch.backends.cudnn.allow_tf32`) or only in exact float32 (`false`). Applies to what runs
/// and is captured afterwards, eager and graphs alike; a captured graph keeps the kernels it was
/// captured with.
pub fn set_conv_tf32(allow: bool) -> Result<()> {
    ffi::set_conv_tf32(allow)
}

/// Whether float32 CUDA convolutions may run in TF32 now.
pub fn conv_tf32() -> Result<bool> {
    ffi::conv_tf32()
}

/// Waits for all GPU work of this process.
pub fn cuda_synchronize() -> Result<()> {
    ffi::cuda_synchronize()
}

/// Times `body` on the GPU with CUDA events on the current stream (milliseconds).
pub fn cuda_time(body: impl FnOnce() -> Result<()>) -> Result<f64> {
    let timer = ffi::Timer::new()?;
    timer.start()?;
    body()?;
    timer.stop()
}

/// Times `n` consecutive calls of `body` (given the call's number) with CUDA events on the
/// current stream, without waiting between them: the host runs ahead as a training loop's does,
/// so what the GPU does between the calls is not counted and processes that meet on the GPU (the
/// ranks of a data-parallel step) are not held up by each other's host. Milliseconds each.
pub fn cuda_time_each(n: usize, mut body: impl FnMut(usize) -> Result<()>) -> Result<Vec<f64>> {
    let mut timers = Vec::with_capacity(n);
    for i in 0..n {
        let timer = ffi::Timer::new()?;
        timer.start()?;
        body(i)?;
        timer.end()?;
        timers.push(timer);
    }
    timers.iter().map(ffi::Timer::elapsed).collect()
}

/// max |output − reference| / max |reference|: how the project compares a prepared model's
/// output with eager.
pub fn relative_error(output: &Tensor, reference: &Tensor) -> f64 {
    let scale = reference.abs().max().double_value(&[]).max(f64::MIN_POSITIVE);
    (output - reference).abs().max().double_value(&[]) / scale
}
