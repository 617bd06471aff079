//! The C++ shim's entry points and the safe types over them. All of this crate's `unsafe` lives
//! here.
//!
//! Every shim call returns 0 or -1; on -1 the C++ exception's message is read back from the
//! shim's per-thread error slot and becomes [`NimbleError::Torch`].

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr;

use nimble_cuda::CaptureMode;
use tch::Tensor;

use crate::error::{NimbleError, Result};

#[allow(non_camel_case_types)]
type c_tensor = torch_sys::C_tensor;

extern "C" {
    fn ns_last_error() -> *const c_char;
    fn ns_free_string(s: *mut c_char);
    fn ns_free_array(a: *mut *mut c_void);
    fn ns_cuda_device_count(out: *mut c_int) -> c_int;
    fn ns_cuda_synchronize() -> c_int;
    fn ns_cuda_allocated_bytes(device: c_int, out: *mut i64) -> c_int;
    fn ns_cuda_empty_cache() -> c_int;
    fn ns_profile_begin() -> c_int;
    fn ns_profile_end(chrome_trace: *const c_char, out: *mut *mut c_char) -> c_int;

    fn ns_trace_begin(keep_state: c_int) -> c_int;
    fn ns_trace_end(out: *mut *mut c_char, params: *mut *mut *mut c_void, n_params: *mut c_int, state: *mut *mut *mut c_void, n_state: *mut c_int) -> c_int;

    fn ns_schedule_new(
        n: c_int,
        names: *const c_char,
        stream_of: *const c_int,
        wait_counts: *const c_int,
        wait_list: *const c_int,
        record: *const u8,
        n_streams: c_int,
        device: c_int,
        timing: c_int,
        out: *mut *mut c_void,
    ) -> c_int;
    fn ns_schedule_free(s: *mut c_void);
    fn ns_pass_begin(s: *mut c_void, graph: *mut c_void, capture_mode: c_int, gate_cycles: i64, arm: c_int) -> c_int;
    fn ns_pass_disarm(s: *mut c_void, problem: *mut *mut c_char) -> c_int;
    fn ns_pass_end(s: *mut c_void, graph: *mut c_void, problem: *mut *mut c_char) -> c_int;
    fn ns_record_on_origin(s: *mut c_void, tensors: *const *mut c_void, n: c_int) -> c_int;
    fn ns_schedule_durations(s: *mut c_void, out_us: *mut f32, n: c_int) -> c_int;

    fn ns_graph_new(out: *mut *mut c_void) -> c_int;
    fn ns_graph_free(g: *mut c_void);
    fn ns_graph_instantiate(g: *mut c_void) -> c_int;
    fn ns_graph_replay(g: *mut c_void) -> c_int;
    fn ns_graph_raw(g: *mut c_void, out: *mut *mut c_void) -> c_int;

    fn ns_timer_new(out: *mut *mut c_void) -> c_int;
    fn ns_timer_free(t: *mut c_void);
    fn ns_timer_start(t: *mut c_void) -> c_int;
    fn ns_timer_stop(t: *mut c_void, ms: *mut f32) -> c_int;

    fn ns_jit_trace_begin(inputs: *const *mut c_void, n: c_int, module: *mut *mut c_void) -> c_int;
    fn ns_jit_trace_end(module: *mut c_void, outputs: *const *mut c_void, n: c_int) -> c_int;
    fn ns_jit_trace_abandon();
    fn ns_jit_load(path: *const c_char, device: c_int, out: *mut *mut c_void) -> c_int;
    fn ns_jit_free(module: *mut c_void);
    fn ns_jit_save(module: *mut c_void, path: *const c_char) -> c_int;
    fn ns_jit_optimize(
        module: *mut c_void,
        fuse: c_int,
        kernels: c_int,
        channels_last: c_int,
        out: *mut *mut c_void,
        applied: *mut c_int,
        fused: *mut c_int,
    ) -> c_int;
    fn ns_channels_last_copy(tensor: *mut c_void, out: *mut *mut c_void) -> c_int;
    fn ns_jit_forward(module: *mut c_void, inputs: *const *mut c_void, n: c_int, outputs: *mut *mut *mut c_void, n_out: *mut c_int) -> c_int;
    fn ns_jit_node_kinds(module: *mut c_void, out: *mut *mut c_char) -> c_int;

    fn ns_grad_enabled(out: *mut c_int) -> c_int;
    fn ns_backward(
        tensors: *const *mut c_void,
        grads: *const *mut c_void,
        n: c_int,
        retain: c_int,
        one_stream: *mut c_void,
        wrt: *const *mut c_void,
        n_wrt: c_int,
        out: *mut *mut *mut c_void,
    ) -> c_int;
    fn ns_grads_reset(params: *const *mut c_void, n: c_int) -> c_int;
    fn ns_fresh_grad_accumulators(params: *const *mut c_void, n: c_int) -> c_int;
    fn ns_sgd_step(params: *const *mut c_void, buffers: *const *mut c_void, n: c_int, lr: f64, momentum: f64, dampening: f64, weight_decay: f64, nesterov: c_int) -> c_int;
    fn ns_adam_step(
        params: *const *mut c_void,
        exp_avgs: *const *mut c_void,
        exp_avg_sqs: *const *mut c_void,
        steps: *const *mut c_void,
        n: c_int,
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
        weight_decay: f64,
    ) -> c_int;
    fn ns_train_state_new(
        forward: *mut c_void,
        backward: *mut c_void,
        outputs: *const *mut c_void,
        grad_outputs: *const *mut c_void,
        n_outputs: c_int,
        params: *const *mut c_void,
        param_grads: *const *mut c_void,
        n_params: c_int,
        out: *mut *mut c_void,
    ) -> c_int;
    fn ns_train_state_free(state: *mut c_void);
    fn ns_train_forward(state: *mut c_void, outputs: *mut *mut *mut c_void, n_out: *mut c_int) -> c_int;
}

/// Turns a shim status into a result, reading the shim's error message on failure.
fn check(call: &'static str, status: c_int) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: the shim keeps a NUL-terminated per-thread message that lives until the next
    // failing call on this thread; we copy it out at once.
    let message = unsafe { CStr::from_ptr(ns_last_error()) }.to_string_lossy().into_owned();
    Err(NimbleError::Torch { call, message })
}

/// Takes ownership of a malloc'd string from the shim.
fn take_string(s: *mut c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: the shim returned a NUL-terminated string allocated with malloc; we copy it and
    // free it exactly once.
    let text = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    unsafe { ns_free_string(s) };
    text
}

fn tensor_ptrs(tensors: &[Tensor]) -> Vec<*mut c_void> {
    tensors.iter().map(|t| t.as_ptr() as *mut c_void).collect()
}

/// Wraps `at::Tensor*`s the shim allocated with `new` as owned tch tensors.
///
/// # Safety
/// Each pointer must be a fresh `new at::Tensor(...)` that nothing else owns.
unsafe fn adopt_tensors(array: *mut *mut c_void, n: usize) -> Vec<Tensor> {
    let mut tensors = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: per the contract above; tch's Tensor takes over the pointer and deletes it.
        tensors.push(unsafe { Tensor::from_ptr(*array.add(i) as *mut c_tensor) });
    }
    tensors
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

/// Returns the caching allocator's unused cached memory to the driver.
pub(crate) fn cuda_empty_cache() -> Result<()> {
    // SAFETY: no arguments; blocks in use are left alone.
    check("empty_cache", unsafe { ns_cuda_empty_cache() })
}

/// Starts libtorch's Kineto profiler with CUDA activities (CUPTI).
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

/// Starts recording the top-level ATen ops run on this thread; with `keep_state`, also the
/// forward's external tensors (see [`ExternalState`]).
pub(crate) fn trace_begin(keep_state: bool) -> Result<()> {
    // SAFETY: no pointers; the shim refuses to nest.
    check("trace_begin", unsafe { ns_trace_begin(keep_state as c_int) })
}

/// What a forward reads that it did not make: the parameters (leaves that require gradients)
/// and every external tensor with a copy of its value from before the forward ran (parameters,
/// BatchNorm's running statistics, other buffers).
#[derive(Default)]
pub(crate) struct ExternalState {
    pub params: Vec<Tensor>,
    pub saved: Vec<(Tensor, Tensor)>,
}

/// Stops recording and returns the trace text (format in the shim) and the external state
/// (empty unless the trace kept it).
pub(crate) fn trace_end() -> Result<(String, ExternalState)> {
    let mut out = ptr::null_mut();
    let (mut params, mut n_params, mut state, mut n_state) = (ptr::null_mut(), 0, ptr::null_mut(), 0);
    // SAFETY: the shim writes a malloc'd string and two malloc'd arrays of new tensors (n_params
    // and 2·n_state of them) on success.
    check("trace_end", unsafe { ns_trace_end(&mut out, &mut params, &mut n_params, &mut state, &mut n_state) })?;
    let text = take_string(out);
    // SAFETY: see above; each array is adopted once and freed.
    let (params, flat) = unsafe {
        let p = adopt_tensors(params, n_params.max(0) as usize);
        let f = adopt_tensors(state, 2 * n_state.max(0) as usize);
        ns_free_array(params);
        ns_free_array(state);
        (p, f)
    };
    let mut flat = flat.into_iter();
    let mut saved = Vec::new();
    while let (Some(tensor), Some(value)) = (flat.next(), flat.next()) {
        saved.push((tensor, value));
    }
    Ok((text, ExternalState { params, saved }))
}

/// Stops a recording and throws it away (for error paths).
pub(crate) fn trace_abandon() {
    // SAFETY: a null out pointer tells the shim to discard the trace; an error (none running) is
    // fine to ignore here.
    let _ = unsafe { ns_trace_end(ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), ptr::null_mut()) };
}

/// A schedule in the shim: per-op streams, waits and events, for scheduled passes.
pub(crate) struct Schedule {
    raw: *mut c_void,
    ops: usize,
}

/// A schedule's data, as plain arrays.
pub(crate) struct ScheduleSpec<'a> {
    pub names: &'a [&'a str],
    pub stream_of: &'a [usize],
    pub waits: &'a [Vec<usize>],
    pub record: &'a [bool],
    pub streams: usize,
}

impl Schedule {
    /// A schedule on CUDA `device`, or (`None`) a check-only one that compares the op sequence
    /// of a pass with the trace and schedules nothing.
    pub(crate) fn new(spec: &ScheduleSpec<'_>, device: Option<usize>, timing: bool) -> Result<Schedule> {
        let n = spec.names.len();
        assert!(spec.stream_of.len() == n && spec.waits.len() == n && spec.record.len() == n, "schedule arrays cover every op");
        let names = CString::new(spec.names.join("\n")).map_err(|_| NimbleError::Internal("an op name contains a NUL byte".into()))?;
        let stream_of: Vec<c_int> = spec.stream_of.iter().map(|&s| s as c_int).collect();
        let wait_counts: Vec<c_int> = spec.waits.iter().map(|w| w.len() as c_int).collect();
        let wait_list: Vec<c_int> = spec.waits.iter().flatten().map(|&p| p as c_int).collect();
        let record: Vec<u8> = spec.record.iter().map(|&r| r as u8).collect();
        let mut raw = ptr::null_mut();
        // SAFETY: every array has the length the shim reads (n, or the sum of wait counts), and
        // lives for the call; the shim copies what it keeps.
        check("schedule_new", unsafe {
            ns_schedule_new(
                n as c_int,
                names.as_ptr(),
                stream_of.as_ptr(),
                wait_counts.as_ptr(),
                wait_list.as_ptr(),
                record.as_ptr(),
                spec.streams as c_int,
                device.map_or(-1, |d| d as c_int),
                timing as c_int,
                &mut raw,
            )
        })?;
        Ok(Schedule { raw, ops: n })
    }

    /// Runs `body` as one scheduled pass (captured into the graph, in the mode, when given).
    /// `gate_cycles` > 0 holds the origin stream busy that long first (see the shim). Returns what
    /// `body` returned, or the problem the shim saw with the op sequence.
    ///
    /// The pass is always ended, also when `body` panics (the panic then continues).
    pub(crate) fn pass<T>(
        &self,
        capture: Option<(&CudaGraph, CaptureMode)>,
        gate_cycles: i64,
        body: impl FnOnce() -> T,
    ) -> Result<std::result::Result<T, String>> {
        self.run_pass(capture, gate_cycles, true, false, body, |value| value)
    }

    /// A pass in two parts: `forward` with every op on its planned stream and checked against
    /// the trace (when `arm`; otherwise ops run where libtorch puts them), then, when the op
    /// sequence was right, `tail` on the origin stream after all streams joined it (the loss,
    /// backward and optimizer of a training step), all in one capture when `capture` is given.
    pub(crate) fn pass_with_tail<T, U>(
        &self,
        capture: Option<(&CudaGraph, CaptureMode)>,
        gate_cycles: i64,
        arm: bool,
        forward: impl FnOnce() -> T,
        tail: impl FnOnce(T) -> U,
    ) -> Result<std::result::Result<U, String>> {
        self.run_pass(capture, gate_cycles, arm, true, forward, tail)
    }

    /// A pass; `has_tail` false: `tail` must do no GPU work (the streams are not joined before
    /// it, only at the end).
    fn run_pass<T, U>(
        &self,
        capture: Option<(&CudaGraph, CaptureMode)>,
        gate_cycles: i64,
        arm: bool,
        has_tail: bool,
        forward: impl FnOnce() -> T,
        tail: impl FnOnce(T) -> U,
    ) -> Result<std::result::Result<U, String>> {
        let graph_raw = capture.map_or(ptr::null_mut(), |(g, _)| g.raw);
        // The shim's encoding of the capture mode.
        let capture_mode: c_int = match capture.map(|(_, mode)| mode) {
            None | Some(CaptureMode::Global) => 0,
            Some(CaptureMode::ThreadLocal) => 1,
            Some(CaptureMode::Relaxed) => 2,
        };
        // SAFETY: `self.raw` and `graph_raw` are live shim objects owned by us.
        check("pass_begin", unsafe { ns_pass_begin(self.raw, graph_raw, capture_mode, gate_cycles, arm as c_int) })?;
        struct End {
            schedule: *mut c_void,
            graph: *mut c_void,
            done: bool,
        }
        impl End {
            fn end(&mut self) -> Result<String> {
                self.done = true;
                let mut problem = ptr::null_mut();
                // SAFETY: ends the pass begun above, once.
                check("pass_end", unsafe { ns_pass_end(self.schedule, self.graph, &mut problem) })?;
                Ok(take_string(problem))
            }
        }
        impl Drop for End {
            fn drop(&mut self) {
                if !self.done {
                    let _ = self.end();
                }
            }
        }
        let mut end = End { schedule: self.raw, graph: graph_raw, done: false };
        let value = forward();
        if has_tail {
            let mut problem = ptr::null_mut();
            // SAFETY: the pass begun above is open; the shim writes a malloc'd string.
            check("pass_disarm", unsafe { ns_pass_disarm(self.raw, &mut problem) })?;
            let problem = take_string(problem);
            if !problem.is_empty() {
                drop(value);
                end.end()?;
                return Ok(Err(problem));
            }
        }
        let value = tail(value);
        let problem = end.end()?;
        Ok(if problem.is_empty() { Ok(value) } else { Err(problem) })
    }

    /// Marks `tensors` as read on the origin stream (they may come from any planned stream), so
    /// the caching allocator does not reuse their memory before the origin stream is done.
    pub(crate) fn record_on_origin(&self, tensors: &[Tensor]) -> Result<()> {
        let ptrs = tensor_ptrs(tensors);
        // SAFETY: a live schedule and tensors for the call.
        check("record_on_origin", unsafe { ns_record_on_origin(self.raw, ptrs.as_ptr(), ptrs.len() as c_int) })
    }

    /// Per-op GPU time of the last (timing) pass, in microseconds.
    pub(crate) fn durations_us(&self) -> Result<Vec<f64>> {
        let mut out = vec![0f32; self.ops];
        // SAFETY: the buffer holds one float per op, as the shim checks.
        check("schedule_durations", unsafe { ns_schedule_durations(self.raw, out.as_mut_ptr(), self.ops as c_int) })?;
        Ok(out.into_iter().map(f64::from).collect())
    }
}

impl Drop for Schedule {
    fn drop(&mut self) {
        // SAFETY: allocated by ns_schedule_new, freed once.
        unsafe { ns_schedule_free(self.raw) }
    }
}

/// An `at::cuda::CUDAGraph` (kept after capture, so it can be inspected).
pub(crate) struct CudaGraph {
    raw: *mut c_void,
}

impl CudaGraph {
    pub(crate) fn new() -> Result<CudaGraph> {
        let mut raw = ptr::null_mut();
        // SAFETY: writes one pointer.
        check("graph_new", unsafe { ns_graph_new(&mut raw) })?;
        Ok(CudaGraph { raw })
    }

    pub(crate) fn instantiate(&self) -> Result<()> {
        // SAFETY: a live graph, captured.
        check("graph_instantiate", unsafe { ns_graph_instantiate(self.raw) })
    }

    /// Launches the graph on the current stream.
    pub(crate) fn replay(&self) -> Result<()> {
        // SAFETY: a live graph.
        check("graph_replay", unsafe { ns_graph_replay(self.raw) })
    }

    /// The captured graph's nodes and edges, read through nimble-cuda.
    pub(crate) fn structure(&self) -> Result<nimble_cuda::GraphStructure> {
        let mut raw = ptr::null_mut();
        // SAFETY: writes one pointer; the graph was captured with keep_graph.
        check("graph_raw", unsafe { ns_graph_raw(self.raw, &mut raw) })?;
        // SAFETY: `raw` is the cudaGraph_t that `self` owns (a CUgraph: the runtime and driver
        // handles are the same object), alive for this call; libtorch made its device's primary
        // context current on this thread when it captured.
        unsafe { nimble_cuda::GraphStructure::from_raw(raw as nimble_cuda::sys::CUgraph) }
            .map_err(|e| NimbleError::Internal(format!("reading the captured graph: {e}")))
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        // SAFETY: allocated by ns_graph_new, freed once; releases the graph's memory pool.
        unsafe { ns_graph_free(self.raw) }
    }
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
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: allocated by ns_timer_new, freed once.
        unsafe { ns_timer_free(self.raw) }
    }
}

/// Which inference rewrites `JitModule::optimized` applies (see `PrepareOptions`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rewrites {
    pub fuse_conv_relu: bool,
    pub fuse_kernels: bool,
    /// `None`: decide from the graph.
    pub channels_last: Option<bool>,
}

/// What the rewrites did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Applied {
    pub channels_last: bool,
    /// The model has grouped (e.g. depthwise) convolutions.
    pub grouped_convs: bool,
    /// Nimble's fused ops in the optimized graph.
    pub fused_ops: usize,
}

/// A TorchScript module (`torch::jit::Module`).
pub(crate) struct JitModule {
    raw: *mut c_void,
}

impl JitModule {
    /// Records a TorchScript trace of `body` run on `inputs`.
    pub(crate) fn trace(inputs: &[Tensor], body: impl FnOnce() -> Vec<Tensor>) -> Result<JitModule> {
        let ins = tensor_ptrs(inputs);
        let mut raw = ptr::null_mut();
        // SAFETY: `ins` points at live tensors for the call; the shim writes a new module.
        check("jit_trace_begin", unsafe { ns_jit_trace_begin(ins.as_ptr(), ins.len() as c_int, &mut raw) })?;
        let module = JitModule { raw };
        struct Abandon(bool);
        impl Drop for Abandon {
            fn drop(&mut self) {
                if self.0 {
                    // SAFETY: abandons the trace begun above, if still running.
                    unsafe { ns_jit_trace_abandon() }
                }
            }
        }
        let mut abandon = Abandon(true);
        let outputs = body();
        let outs = tensor_ptrs(&outputs);
        // SAFETY: live module and output tensors.
        let ended = check("jit_trace_end", unsafe { ns_jit_trace_end(module.raw, outs.as_ptr(), outs.len() as c_int) });
        abandon.0 = ended.is_err();
        drop(abandon);
        ended?;
        Ok(module)
    }

    /// Loads a `torch.jit.save`d module onto `device` (`None`: the CPU).
    pub(crate) fn load(path: &std::path::Path, device: Option<usize>) -> Result<JitModule> {
        let text = path.to_str().ok_or_else(|| NimbleError::InvalidInput(format!("path {} is not UTF-8", path.display())))?;
        let c_path = CString::new(text).map_err(|_| NimbleError::InvalidInput(format!("path {} contains a NUL byte", path.display())))?;
        let mut raw = ptr::null_mut();
        // SAFETY: a NUL-terminated path; the shim writes a new module.
        check("jit_load", unsafe { ns_jit_load(c_path.as_ptr(), device.map_or(-1, |d| d as c_int), &mut raw) })?;
        Ok(JitModule { raw })
    }

    /// Writes the module as a TorchScript file.
    pub(crate) fn save(&self, path: &std::path::Path) -> Result<()> {
        let text = path.to_str().ok_or_else(|| NimbleError::InvalidInput(format!("path {} is not UTF-8", path.display())))?;
        let c_path = CString::new(text).map_err(|_| NimbleError::InvalidInput(format!("path {} contains a NUL byte", path.display())))?;
        // SAFETY: a live module and a NUL-terminated path.
        check("jit_save", unsafe { ns_jit_save(self.raw, c_path.as_ptr()) })
    }

    /// Frozen and optimized for inference with `rewrites` (see the shim's `ns_jit_optimize`).
    pub(crate) fn optimized(&self, rewrites: &Rewrites) -> Result<(JitModule, Applied)> {
        let mut raw = ptr::null_mut();
        let (mut channels_last, mut fused) = (0, 0);
        let mode = rewrites.channels_last.map_or(2, c_int::from);
        // SAFETY: a live module; the shim writes a new one and the two counts.
        check("jit_optimize", unsafe {
            ns_jit_optimize(
                self.raw,
                rewrites.fuse_conv_relu as c_int,
                rewrites.fuse_kernels as c_int,
                mode,
                &mut raw,
                &mut channels_last,
                &mut fused,
            )
        })?;
        Ok((JitModule { raw }, Applied { channels_last: channels_last & 1 != 0, grouped_convs: channels_last & 2 != 0, fused_ops: fused as usize }))
    }

    /// Runs `forward`; tuple or list outputs are flattened.
    pub(crate) fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let ins = tensor_ptrs(inputs);
        let mut array = ptr::null_mut();
        let mut n = 0;
        // SAFETY: live module and inputs; on success the shim writes a malloc'd array of `n`
        // new tensors, which we adopt and then free the array.
        check("jit_forward", unsafe { ns_jit_forward(self.raw, ins.as_ptr(), ins.len() as c_int, &mut array, &mut n) })?;
        // SAFETY: see above.
        let tensors = unsafe { adopt_tensors(array, n.max(0) as usize) };
        // SAFETY: the array itself, malloc'd by the shim.
        unsafe { ns_free_array(array) };
        Ok(tensors)
    }

    /// Node kinds of the forward graph with their counts.
    pub(crate) fn node_kinds(&self) -> Result<Vec<(String, usize)>> {
        let mut out = ptr::null_mut();
        // SAFETY: a live module; the shim writes a malloc'd string.
        check("jit_node_kinds", unsafe { ns_jit_node_kinds(self.raw, &mut out) })?;
        Ok(take_string(out)
            .lines()
            .filter_map(|line| line.rsplit_once('=').map(|(k, n)| (k.to_string(), n.parse().unwrap_or(0))))
            .collect())
    }
}

impl Drop for JitModule {
    fn drop(&mut self) {
        // SAFETY: allocated by the shim with `new`, freed once.
        unsafe { ns_jit_free(self.raw) }
    }
}

/// Whether autograd records on this thread (libtorch's grad mode).
pub(crate) fn grad_enabled() -> Result<bool> {
    let mut on = 0;
    // SAFETY: writes one int.
    check("grad_enabled", unsafe { ns_grad_enabled(&mut on) })?;
    Ok(on != 0)
}

/// Backward from `tensors` (with `grads`, or implicit ones for scalars), accumulating into the
/// leaves' `.grad`; or, with `wrt`, returning the gradients of those tensors (undefined where
/// unused) and leaving `.grad` alone. With `one_stream`, every backward op runs on that
/// schedule's origin stream rather than its forward op's stream.
pub(crate) fn backward(tensors: &[Tensor], grads: Option<&[Tensor]>, retain: bool, one_stream: Option<&Schedule>, wrt: Option<&[Tensor]>) -> Result<Vec<Tensor>> {
    let ts = tensor_ptrs(tensors);
    let gs = grads.map(tensor_ptrs);
    let ws = wrt.map(tensor_ptrs);
    if gs.as_ref().is_some_and(|g| g.len() != ts.len()) {
        return Err(NimbleError::Internal("backward: one gradient per tensor".into()));
    }
    let mut array = ptr::null_mut();
    // SAFETY: live tensors (and schedule) for the call; the gradient array, when given, has one
    // entry per tensor; with `wrt`, the shim writes a malloc'd array of n_wrt new tensors.
    check("backward", unsafe {
        ns_backward(
            ts.as_ptr(),
            gs.as_ref().map_or(ptr::null(), |g| g.as_ptr()),
            ts.len() as c_int,
            retain as c_int,
            one_stream.map_or(ptr::null_mut(), |s| s.raw),
            ws.as_ref().map_or(ptr::null(), |w| w.as_ptr()),
            ws.as_ref().map_or(0, |w| w.len() as c_int),
            &mut array,
        )
    })?;
    let Some(ws) = ws else { return Ok(Vec::new()) };
    // SAFETY: see above; adopted once, the array freed.
    let tensors = unsafe { adopt_tensors(array, ws.len()) };
    // SAFETY: the array itself, malloc'd by the shim.
    unsafe { ns_free_array(array) };
    Ok(tensors)
}

/// Sets the parameters' `.grad` to undefined.
pub(crate) fn grads_reset(params: &[Tensor]) -> Result<()> {
    let ps = tensor_ptrs(params);
    // SAFETY: live tensors for the call.
    check("grads_reset", unsafe { ns_grads_reset(ps.as_ptr(), ps.len() as c_int) })
}

/// Makes autograd create the parameters' gradient accumulators afresh at their next use (on the
/// stream current then; see the shim).
pub(crate) fn fresh_grad_accumulators(params: &[Tensor]) -> Result<()> {
    let ps = tensor_ptrs(params);
    // SAFETY: live tensors for the call.
    check("fresh_grad_accumulators", unsafe { ns_fresh_grad_accumulators(ps.as_ptr(), ps.len() as c_int) })
}

/// The hyper-parameters of one SGD step.
pub(crate) struct SgdArgs {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
}

/// One fused SGD step over the parameters that have a gradient (`buffers`: one per parameter).
pub(crate) fn sgd_step(params: &[Tensor], buffers: &[Tensor], args: &SgdArgs) -> Result<()> {
    if args.momentum != 0.0 && buffers.len() != params.len() {
        return Err(NimbleError::Internal("sgd: one momentum buffer per parameter".into()));
    }
    let (ps, bs) = (tensor_ptrs(params), tensor_ptrs(buffers));
    // SAFETY: live tensors; the buffer array has one entry per parameter when momentum is used
    // (checked above) and is not read otherwise.
    check("sgd_step", unsafe {
        ns_sgd_step(ps.as_ptr(), bs.as_ptr(), ps.len() as c_int, args.lr, args.momentum, args.dampening, args.weight_decay, args.nesterov as c_int)
    })
}

/// The hyper-parameters of one Adam step.
pub(crate) struct AdamArgs {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// One fused Adam step; `exp_avgs`, `exp_avg_sqs` and `steps` have one tensor per parameter.
pub(crate) fn adam_step(params: &[Tensor], exp_avgs: &[Tensor], exp_avg_sqs: &[Tensor], steps: &[Tensor], args: &AdamArgs) -> Result<()> {
    let n = params.len();
    if exp_avgs.len() != n || exp_avg_sqs.len() != n || steps.len() != n {
        return Err(NimbleError::Internal("adam: one state tensor of each kind per parameter".into()));
    }
    let (ps, ms, vs, ss) = (tensor_ptrs(params), tensor_ptrs(exp_avgs), tensor_ptrs(exp_avg_sqs), tensor_ptrs(steps));
    // SAFETY: live tensors, four arrays of length n (checked above).
    check("adam_step", unsafe {
        ns_adam_step(ps.as_ptr(), ms.as_ptr(), vs.as_ptr(), ss.as_ptr(), n as c_int, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay)
    })
}

/// The shim's state for autograd-mode training: a forward and a backward graph behind a custom
/// autograd function. Dropping it marks the state released (outputs of its forwards then refuse
/// their backward) before the graphs it points to go away.
pub(crate) struct TrainState {
    raw: *mut c_void,
}

impl TrainState {
    /// `forward` and `backward` must outlive the state (drop the state first).
    pub(crate) fn new(forward: &CudaGraph, backward: &CudaGraph, outputs: &[Tensor], grad_outputs: &[Tensor], params: &[Tensor], param_grads: &[Tensor]) -> Result<TrainState> {
        if outputs.len() != grad_outputs.len() || params.len() != param_grads.len() {
            return Err(NimbleError::Internal("train state: one gradient per output and per parameter".into()));
        }
        let (os, gs, ps, pgs) = (tensor_ptrs(outputs), tensor_ptrs(grad_outputs), tensor_ptrs(params), tensor_ptrs(param_grads));
        let mut raw = ptr::null_mut();
        // SAFETY: live graphs and tensors; the shim copies the tensors (new references) and keeps
        // the graph pointers, which the owner keeps alive until this state is dropped.
        check("train_state_new", unsafe {
            ns_train_state_new(forward.raw, backward.raw, os.as_ptr(), gs.as_ptr(), os.len() as c_int, ps.as_ptr(), pgs.as_ptr(), ps.len() as c_int, &mut raw)
        })?;
        Ok(TrainState { raw })
    }

    /// Replays the forward graph through the autograd function (needs grad mode on).
    pub(crate) fn forward(&self) -> Result<Vec<Tensor>> {
        let mut array = ptr::null_mut();
        let mut n = 0;
        // SAFETY: a live state; on success a malloc'd array of `n` new tensors, adopted and freed.
        check("train_forward", unsafe { ns_train_forward(self.raw, &mut array, &mut n) })?;
        // SAFETY: see above.
        let tensors = unsafe { adopt_tensors(array, n.max(0) as usize) };
        // SAFETY: the array itself, malloc'd by the shim.
        unsafe { ns_free_array(array) };
        Ok(tensors)
    }
}

impl Drop for TrainState {
    fn drop(&mut self) {
        // SAFETY: created by ns_train_state_new; the owner's reference, released once.
        unsafe { ns_train_state_free(self.raw) }
    }
}
