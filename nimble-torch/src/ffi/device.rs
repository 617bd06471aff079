//! The device and its allocator, event timing, the Kineto profiler and layout copies (`shim/device.cpp`).

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;

use tch::Tensor;

use super::{adopt_tensors, check, take_string};
use crate::error::{NimbleError, Result};

extern "C" {
    fn ns_cuda_device_count(out: *mut c_int) -> c_int;
    fn ns_cuda_synchronize() -> c_int;
    fn ns_set_device(device: c_int) -> c_int;
    fn ns_cuda_allocated_bytes(device: c_int, out: *mut i64) -> c_int;
    fn ns_cuda_empty_cache() -> c_int;
    fn ns_set_conv_tf32(allow: c_int) -> c_int;
    fn ns_conv_tf32(out: *mut c_int) -> c_int;
    fn ns_sm_limits(device: c_int, out: *mut i64) -> c_int;
    fn ns_profile_begin() -> c_int;
    fn ns_profile_end(chrome_trace: *const c_char, out: *mut *mut c_char) -> c_int;
    fn ns_timer_new(out: *mut *mut c_void) -> c_int;
    fn ns_timer_free(t: *mut c_void);
    fn ns_timer_start(t: *mut c_void) -> c_int;
    fn ns_timer_stop(t: *mut c_void, ms: *mut f32) -> c_int;
    fn ns_timer_end(t: *mut c_void) -> c_int;
    fn ns_timer_elapsed(t: *mut c_void, ms: *mut f32) -> c_int;
    fn ns_channels_last_copy(tensor: *mut c_void, out: *mut *mut c_void) -> c_int;
}

/// A copy of `tensor` in channels-last layout (4-D; other tensors are plainly copied).
pub(crate) fn channels_last_copy(tensor: &Tensor) -> Result<Tensor> {
    let mut out = ptr::null_mut();
    // SAFETY: a live tensor; on success the shim writes a new `at::Tensor*` that we adopt.
    check("channels_last_copy", unsafe { ns_channels_last_copy(tensor.as_ptr() as *mut c_void, &mut out) })?;
    // SAFETY: a fresh tensor nothing else owns.
    Ok(unsafe { adopt_tensors(&mut out, 1) }.remove(0))
}

/// Number of CUDA devices libtorch sees (0 when CUDA is unavailable).
pub(crate) fn cuda_device_count() -> Result<usize> {
    let mut n = 0;
    // SAFETY: writes one int.
    check("device_count", unsafe { ns_cuda_device_count(&mut n) })?;
    Ok(n.max(0) as usize)
}

/// Makes `device` this thread's current CUDA device.
pub(crate) fn set_device(device: usize) -> Result<()> {
    // SAFETY: one int; the shim checks the range.
    check("set_device", unsafe { ns_set_device(device as c_int) })
}

/// Waits for all work on the current device.
pub(crate) fn cuda_synchronize() -> Result<()> {
    // SAFETY: no arguments.
    check("synchronize", unsafe { ns_cuda_synchronize() })
}

/// Bytes the CUDA caching allocator has handed out and not taken back on `device`.
pub(crate) fn cuda_allocated_bytes(device: usize) -> Result<u64> {
    let mut bytes = 0i64;
    // SAFETY: writes one integer.
    check("allocated_bytes", unsafe { ns_cuda_allocated_bytes(device as c_int, &mut bytes) })?;
    Ok(bytes.max(0) as u64)
}

/// Lets float32 CUDA convolutions run in TF32, or not.
pub(crate) fn set_conv_tf32(allow: bool) -> Result<()> {
    // SAFETY: sets a flag of libtorch's global context.
    check("set_conv_tf32", unsafe { ns_set_conv_tf32(c_int::from(allow)) })
}

/// Whether float32 CUDA convolutions may run in TF32.
pub(crate) fn conv_tf32() -> Result<bool> {
    let mut allowed = 0;
    // SAFETY: writes one int.
    check("conv_tf32", unsafe { ns_conv_tf32(&mut allowed) })?;
    Ok(allowed != 0)
}

/// Returns the caching allocator's unused cached memory to the driver.
pub(crate) fn cuda_empty_cache() -> Result<()> {
    // SAFETY: no arguments; blocks in use are left alone.
    check("empty_cache", unsafe { ns_cuda_empty_cache() })
}

/// What one multiprocessor of CUDA `device` holds, and how many it has: multiprocessors, threads,
/// blocks, registers and shared memory bytes per multiprocessor (each at least 1).
pub(crate) fn sm_limits(device: usize) -> Result<[u64; 5]> {
    let mut out = [0i64; 5];
    // SAFETY: the shim writes five integers.
    check("sm_limits", unsafe { ns_sm_limits(device as c_int, out.as_mut_ptr()) })?;
    Ok(out.map(|v| v.max(1) as u64))
}

pub(crate) fn profile_begin() -> Result<()> {
    // SAFETY: no arguments; the shim refuses to start a second profiler.
    check("profile_begin", unsafe { ns_profile_begin() })
}

/// Stops the profiler: one line per device activity (see the shim), and the Chrome trace
/// written to `chrome_trace` when given.
pub(crate) fn profile_end(chrome_trace: Option<&str>) -> Result<String> {
    let path = chrome_trace.map(CString::new).transpose().map_err(|_| NimbleError::Internal("the trace path contains a NUL byte".into()))?;
    let mut out = ptr::null_mut();
    // SAFETY: the path is NUL-terminated or null; on success the shim writes a malloc'd string
    // that take_string frees.
    check("profile_end", unsafe { ns_profile_end(path.as_ref().map_or(ptr::null(), |p| p.as_ptr()), &mut out) })?;
    Ok(take_string(out))
}

/// Two timing events on the current stream.
pub(crate) struct Timer {
    raw: *mut c_void,
}

impl Timer {
    pub(crate) fn new() -> Result<Timer> {
        let mut raw = ptr::null_mut();
        // SAFETY: writes one pointer.
        check("timer_new", unsafe { ns_timer_new(&mut raw) })?;
        Ok(Timer { raw })
    }
    pub(crate) fn start(&self) -> Result<()> {
        // SAFETY: a live timer.
        check("timer_start", unsafe { ns_timer_start(self.raw) })
    }
    /// Milliseconds since `start`, on the GPU; waits for the stream.
    pub(crate) fn stop(&self) -> Result<f64> {
        let mut ms = 0f32;
        // SAFETY: a live timer; writes one float.
        check("timer_stop", unsafe { ns_timer_stop(self.raw, &mut ms) })?;
        Ok(f64::from(ms))
    }
    /// Records the end without waiting.
    pub(crate) fn end(&self) -> Result<()> {
        // SAFETY: a live timer.
        check("timer_end", unsafe { ns_timer_end(self.raw) })
    }
    /// Milliseconds from start to the recorded end; waits for the end.
    pub(crate) fn elapsed(&self) -> Result<f64> {
        let mut ms = 0f32;
        // SAFETY: a live timer; writes one float.
        check("timer_elapsed", unsafe { ns_timer_elapsed(self.raw, &mut ms) })?;
        Ok(f64::from(ms))
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: allocated by ns_timer_new, freed once.
        unsafe { ns_timer_free(self.raw) }
    }
}
