//! The C++ shim's entry points and the safe types over them: all of this crate's `unsafe`.
//!
//! One submodule per file of the shim (whose C ABI is `shim/nimble_shim.h`), each declaring the
//! entry points it calls:
//!
//! | module     | shim file      | what                                                        |
//! |------------|----------------|-------------------------------------------------------------|
//! | `device`   | `device.cpp`   | device count, synchronize, allocator, timing events, profiler, layout copies |
//! | `record`   | `record.cpp`   | recording a forward's top-level ops                         |
//! | `passes`   | `passes.cpp`   | schedules, scheduled passes, CUDA graphs                    |
//! | `jit`      | `jit.cpp`      | TorchScript modules and the inference rewrites              |
//! | `training` | `training.cpp` | backward, fused optimizer steps, the autograd function      |
//! | `comm`     | `comm.cpp`     | NCCL communicators, eager collectives, the gradient reducer |
//!
//! Every shim call returns 0 or -1; on -1 the C++ exception's message is read back from the
//! shim's per-thread error slot and becomes [`NimbleError::Torch`].

use std::ffi::{c_char, c_int, c_void, CStr};

use tch::Tensor;

use crate::error::{NimbleError, Result};

mod comm;
mod device;
mod jit;
mod passes;
mod record;
mod training;

pub(crate) use comm::*;
pub(crate) use device::*;
pub(crate) use jit::*;
pub(crate) use passes::*;
pub(crate) use record::*;
pub(crate) use training::*;

#[allow(non_camel_case_types)]
type c_tensor = torch_sys::C_tensor;

extern "C" {
    fn ns_last_error() -> *const c_char;
    fn ns_free_string(s: *mut c_char);
    pub(super) fn ns_free_array(a: *mut *mut c_void);
}

/// Turns a shim status into a result, reading the shim's error message on failure.
pub(super) fn check(call: &'static str, status: c_int) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    // SAFETY: the shim keeps a NUL-terminated per-thread message that lives until the next
    // failing call on this thread; we copy it out at once.
    let message = unsafe { CStr::from_ptr(ns_last_error()) }.to_string_lossy().into_owned();
    Err(NimbleError::Torch { call, message: summary(message) })
}

/// The TorchScript interpreter's errors carry two tracebacks before the line that says what
/// went wrong; that line is the message. Loading a module that calls an operator libtorch does
/// not have (a C++ extension's, such as torchvision's) says which and what it means.
fn summary(message: String) -> String {
    if let Some(op) = message.lines().find_map(|line| line.trim().strip_prefix("Unknown builtin op: ")) {
        return unknown_operator(op.trim_end_matches('.'));
    }
    if !message.contains("Traceback of TorchScript") {
        return message;
    }
    match message.lines().rev().map(str::trim).find(|line| !line.is_empty()) {
        Some(last) => format!("{last} (in the TorchScript module's forward)"),
        None => message,
    }
}

/// The error for a module that calls `op`, an operator this libtorch does not register.
fn unknown_operator(op: &str) -> String {
    let mut message = format!(
        "the module calls `{op}`, an operator of a C++ extension that this libtorch has not loaded (a TorchScript file names such operators, it does not contain them)"
    );
    if op.starts_with("torchvision::") {
        message.push_str("; in Python, `import torchvision` before `nimble_rs.Nimble` registers torchvision's");
        let reason = crate::error::host_sync_reason(op, op);
        if reason.contains("non-maximum suppression") {
            // The refusal the engine would give once the operator loaded: a host sync.
            message.push_str(&format!(". Either way it cannot be one CUDA graph: its forward synchronizes with the host ({reason})"));
        }
    }
    message
}

/// Takes ownership of a malloc'd string from the shim.
pub(super) fn take_string(s: *mut c_char) -> String {
    if s.is_null() {
        return String::new();
    }
    // SAFETY: the shim returned a NUL-terminated string allocated with malloc; we copy it and
    // free it exactly once.
    let text = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    unsafe { ns_free_string(s) };
    text
}

pub(super) fn tensor_ptrs(tensors: &[Tensor]) -> Vec<*mut c_void> {
    tensors.iter().map(|t| t.as_ptr() as *mut c_void).collect()
}

/// Wraps `at::Tensor*`s the shim allocated with `new` as owned tch tensors.
///
/// # Safety
/// Each pointer must be a fresh `new at::Tensor(...)` that nothing else owns.
pub(super) unsafe fn adopt_tensors(array: *mut *mut c_void, n: usize) -> Vec<Tensor> {
    let mut tensors = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: per the contract above; tch's Tensor takes over the pointer and deletes it.
        tensors.push(unsafe { Tensor::from_ptr(*array.add(i) as *mut c_tensor) });
    }
    tensors
}

#[cfg(test)]
mod tests {
    use super::summary;

    #[test]
    fn a_module_calling_an_operator_libtorch_lacks_is_refused_saying_which_and_why() {
        // What libtorch says on loading a scripted module that calls torchvision.ops.nms,
        // torchvision's C++ library not loaded (shortened).
        let loaded = "\nUnknown builtin op: torchvision::nms.\nCould not find any similar ops to torchvision::nms. This op may not exist or may not be currently supported in TorchScript.\n:\n  File \"code/__torch__/torchvision/ops/boxes.py\", line 6\n";
        let message = summary(loaded.to_string());
        assert!(message.starts_with("the module calls `torchvision::nms`"), "{message}");
        assert!(message.contains("import torchvision") && message.contains("synchronizes with the host") && message.contains("non-maximum suppression"), "{message}");
        let other = summary(loaded.replace("torchvision::nms", "my_ops::fused").to_string());
        assert!(other.starts_with("the module calls `my_ops::fused`") && !other.contains("host"), "{other}");
        let deform = summary(loaded.replace("torchvision::nms", "torchvision::deform_conv2d").to_string());
        assert!(deform.contains("import torchvision") && !deform.contains("synchronizes"), "{deform}");
    }
}
