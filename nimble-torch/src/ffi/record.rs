//! Recording a forward's top-level ops (`shim/record.cpp`).

use std::ffi::{c_char, c_int, c_void};
use std::ptr;

use tch::Tensor;

use super::{adopt_tensors, check, ns_free_array, take_string};
use crate::error::Result;

extern "C" {
    fn ns_trace_begin(keep_state: c_int) -> c_int;
    fn ns_trace_end(out: *mut *mut c_char, params: *mut *mut *mut c_void, n_params: *mut c_int, state: *mut *mut *mut c_void, n_state: *mut c_int) -> c_int;
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
