//! Backward passes, fused optimizer steps and the autograd function over captured graphs
//! (`shim/training.cpp`).

use std::ffi::{c_int, c_void};
use std::ptr;

use tch::Tensor;

use super::passes::{CudaGraph, Schedule};
use super::{adopt_tensors, check, ns_free_array, tensor_ptrs};
use crate::error::{NimbleError, Result};

extern "C" {
    fn ns_grad_enabled(out: *mut c_int) -> c_int;
    fn ns_backward(tensors: *const *mut c_void, grads: *const *mut c_void, n: c_int, retain: c_int, one_stream: *mut c_void, wrt: *const *mut c_void, n_wrt: c_int, out: *mut *mut *mut c_void) -> c_int;
    fn ns_grads_reset(params: *const *mut c_void, n: c_int) -> c_int;
    fn ns_fresh_grad_accumulators(params: *const *mut c_void, n: c_int) -> c_int;
    fn ns_sgd_step(params: *const *mut c_void, buffers: *const *mut c_void, n: c_int, lr: f64, momentum: f64, dampening: f64, weight_decay: f64, nesterov: c_int) -> c_int;
    fn ns_adam_step(params: *const *mut c_void, exp_avgs: *const *mut c_void, exp_avg_sqs: *const *mut c_void, steps: *const *mut c_void, n: c_int, lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64) -> c_int;
    fn ns_train_state_new(forward: *mut c_void, backward: *mut c_void, outputs: *const *mut c_void, grad_outputs: *const *mut c_void, n_outputs: c_int, params: *const *mut c_void, param_grads: *const *mut c_void, n_params: c_int, out: *mut *mut c_void) -> c_int;
    fn ns_train_state_free(state: *mut c_void);
    fn ns_train_forward(state: *mut c_void, outputs: *mut *mut *mut c_void, n_out: *mut c_int) -> c_int;
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
