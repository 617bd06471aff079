//! Schedules, scheduled passes and CUDA graphs (`shim/passes.cpp`).

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;

use nimble_cuda::CaptureMode;
use tch::Tensor;

use super::{check, take_string, tensor_ptrs};
use crate::error::{NimbleError, Result};

extern "C" {
    fn ns_schedule_new(n: c_int, names: *const c_char, stream_of: *const c_int, wait_counts: *const c_int, wait_list: *const c_int, record: *const u8, n_streams: c_int, device: c_int, timing: c_int, out: *mut *mut c_void) -> c_int;
    fn ns_schedule_free(s: *mut c_void);
    fn ns_pass_begin(s: *mut c_void, graph: *mut c_void, capture_mode: c_int, gate_cycles: i64, arm: c_int) -> c_int;
    fn ns_pass_disarm(s: *mut c_void, problem: *mut *mut c_char) -> c_int;
    fn ns_pass_end(s: *mut c_void, graph: *mut c_void, problem: *mut *mut c_char) -> c_int;
    fn ns_record_on_origin(s: *mut c_void, tensors: *const *mut c_void, n: c_int) -> c_int;
    fn ns_schedule_durations(s: *mut c_void, out_us: *mut f32, n: c_int) -> c_int;
    fn ns_schedule_node_ranges(s: *mut c_void, out: *mut c_int, n: c_int) -> c_int;
    fn ns_graph_new(out: *mut *mut c_void) -> c_int;
    fn ns_graph_free(g: *mut c_void);
    fn ns_graph_instantiate(g: *mut c_void) -> c_int;
    fn ns_graph_replay(g: *mut c_void) -> c_int;
    fn ns_graph_raw(g: *mut c_void, out: *mut *mut c_void) -> c_int;
}

/// A schedule in the shim: per-op streams, waits and events, for scheduled passes.
pub(crate) struct Schedule {
    pub(super) raw: *mut c_void,
    ops: usize,
}

/// What a schedule measures per op, beside issuing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OpTiming {
    Off,
    /// An event pair around each op ([`Schedule::durations_us`]).
    Events,
    /// The capture's node count before and after each op ([`Schedule::node_ranges`]).
    CapturedNodes,
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
    pub(crate) fn new(spec: &ScheduleSpec<'_>, device: Option<usize>, timing: OpTiming) -> Result<Schedule> {
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
                match timing {
                    OpTiming::Off => 0,
                    OpTiming::Events => 1,
                    OpTiming::CapturedNodes => 2,
                },
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

    /// Per op of the last captured pass: the capture's node count before and after it, so a
    /// one-stream capture's nodes `start..end` are the op's; `None` where it was not captured.
    pub(crate) fn node_ranges(&self) -> Result<Vec<Option<std::ops::Range<usize>>>> {
        let mut out = vec![0 as c_int; 2 * self.ops];
        // SAFETY: the buffer holds two ints per op, as the shim checks.
        check("schedule_node_ranges", unsafe { ns_schedule_node_ranges(self.raw, out.as_mut_ptr(), self.ops as c_int) })?;
        Ok(out.chunks(2).map(|r| (r[0] >= 0 && r[1] >= r[0]).then(|| r[0] as usize..r[1] as usize)).collect())
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
    pub(super) raw: *mut c_void,
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
