//! TorchScript modules: tracing, loading, saving, the inference rewrites, running (`shim/jit.cpp`).

use std::ffi::{c_char, c_int, c_void, CString};
use std::ptr;

use tch::Tensor;

use super::{adopt_tensors, check, ns_free_array, take_string, tensor_ptrs};
use crate::error::{NimbleError, Result};

extern "C" {
    fn ns_jit_trace_begin(inputs: *const *mut c_void, n: c_int, module: *mut *mut c_void) -> c_int;
    fn ns_jit_trace_end(module: *mut c_void, outputs: *const *mut c_void, n: c_int) -> c_int;
    fn ns_jit_trace_abandon();
    fn ns_jit_load(path: *const c_char, device: c_int, out: *mut *mut c_void) -> c_int;
    fn ns_jit_free(module: *mut c_void);
    fn ns_jit_save(module: *mut c_void, path: *const c_char) -> c_int;
    fn ns_jit_optimize(module: *mut c_void, on_host: c_int, fold_half: c_int, fuse: c_int, kernels: c_int, channels_last: c_int, out: *mut *mut c_void, applied: *mut c_int, fused: *mut c_int) -> c_int;
    fn ns_jit_forward(module: *mut c_void, inputs: *const *mut c_void, n: c_int, train: c_int, outputs: *mut *mut *mut c_void, n_out: *mut c_int, structure: *mut *mut c_char) -> c_int;
    fn ns_jit_bind(module: *mut c_void, name: *const c_char, value: *mut c_void, check_only: c_int) -> c_int;
    fn ns_jit_to(module: *mut c_void, dtype: c_int) -> c_int;
    fn ns_jit_arguments(module: *mut c_void, out: *mut *mut c_char) -> c_int;
    fn ns_jit_node_kinds(module: *mut c_void, out: *mut *mut c_char) -> c_int;
    fn ns_jit_fold_host_values(module: *mut c_void, inputs: *const *mut c_void, n: c_int, out: *mut *mut c_void, folded: *mut c_int) -> c_int;
    fn ns_set_linear_gemm(mode: c_int) -> c_int;
    fn ns_set_conv_relu(mode: c_int) -> c_int;
}

/// How `nimble::linear` computes on CUDA from now on (see `crate::LinearGemm`).
pub(crate) fn set_linear_gemm(gemm: crate::LinearGemm) -> Result<()> {
    let mode = match gemm {
        crate::LinearGemm::Timed => 0,
        crate::LinearGemm::Aten => 1,
        crate::LinearGemm::Plain => 2,
    };
    set_mode("set_linear_gemm", ns_set_linear_gemm, mode)
}

/// How `nimble::conv2d_relu` computes on CUDA from now on (see `crate::ConvRelu`).
pub(crate) fn set_conv_relu(way: crate::ConvRelu) -> Result<()> {
    let mode = match way {
        crate::ConvRelu::Timed => 0,
        crate::ConvRelu::Cudnn => 1,
        crate::ConvRelu::Epilogue => 2,
    };
    set_mode("set_conv_relu", ns_set_conv_relu, mode)
}

/// Stores `mode` through one of the shim's mode setters.
fn set_mode(what: &'static str, setter: unsafe extern "C" fn(c_int) -> c_int, mode: c_int) -> Result<()> {
    // SAFETY: each setter stores one integer in the shim's atomic and reads nothing else.
    check(what, unsafe { setter(mode) })
}

/// Which inference rewrites `JitModule::optimized` applies (see `PrepareOptions`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rewrites {
    pub fuse_conv_relu: bool,
    pub fuse_kernels: bool,
    /// `None`: decide from the graph.
    pub channels_last: Option<bool>,
    /// Freeze a module that lives on a GPU on a CPU copy of itself when the shim's `freeze.cpp`
    /// judges that faster (`PrepareOptions::freeze_on_host`); false freezes it where it lives.
    pub freeze_on_host: bool,
    /// Fold BatchNorm into the convolutions (in float32) also in a float16 or bfloat16 module
    /// (`PrepareOptions::fold_half_precision`).
    pub fold_half_precision: bool,
}

/// What the rewrites did.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Applied {
    pub channels_last: bool,
    /// The model has 2-D convolutions, so that both layouts may be tried (cleared when
    /// channels-last cannot run at all).
    pub convs: bool,
    /// Some of them are grouped (e.g. depthwise).
    pub grouped_convs: bool,
    /// Nimble's fused ops in the optimized graph.
    pub fused_ops: usize,
    /// The module was frozen on a CPU copy (see `Rewrites::freeze_on_host`).
    pub frozen_on_host: bool,
    /// The automatic layout is NCHW for eager's numbers, not to be tried against NHWC (a
    /// half-precision model whose single convolution is its stem: see the shim's jit.cpp).
    pub layout_for_numbers: bool,
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
                rewrites.freeze_on_host as c_int,
                rewrites.fold_half_precision as c_int,
                rewrites.fuse_conv_relu as c_int,
                rewrites.fuse_kernels as c_int,
                mode,
                &mut raw,
                &mut channels_last,
                &mut fused,
            )
        })?;
        Ok((JitModule { raw }, Applied { channels_last: channels_last & 1 != 0, convs: channels_last & 2 != 0, grouped_convs: channels_last & 4 != 0, fused_ops: fused as usize, frozen_on_host: channels_last & 8 != 0, layout_for_numbers: channels_last & 16 != 0 }))
    }

    /// A copy of the module (sharing its parameters) in whose forward each copy to the GPU of a
    /// value that the host computes from constants and the inputs' shapes alone is a constant,
    /// computed on `inputs`, and how many such copies it folded; `None` when there are none (see
    /// the shim's `host_values.cpp`). The copy's forward takes only inputs shaped like `inputs`.
    pub(crate) fn with_host_values_folded(&self, inputs: &[Tensor]) -> Result<Option<(JitModule, usize)>> {
        let ins = tensor_ptrs(inputs);
        let mut raw = ptr::null_mut();
        let mut folded = 0;
        // SAFETY: a live module and live inputs; the shim writes a new module or null, and a count.
        check("jit_fold_host_values", unsafe { ns_jit_fold_host_values(self.raw, ins.as_ptr(), ins.len() as c_int, &mut raw, &mut folded) })?;
        Ok((!raw.is_null()).then(|| (JitModule { raw }, folded as usize)))
    }

    /// Runs `forward` in evaluation mode, or in training mode with `train` (what a scripted
    /// module's `self.training` reads): the output's tensors, flat and in order.
    pub(crate) fn forward(&self, inputs: &[Tensor], train: bool) -> Result<Vec<Tensor>> {
        self.run_forward(inputs, train, false).map(|(tensors, _)| tensors)
    }

    /// As [`JitModule::forward`], also returning the output's structure as JSON (tuples, lists,
    /// dicts, None and constants around the tensors' indices; format in `shim/jit.cpp`, read by
    /// `output::Layout::parse`).
    pub(crate) fn forward_structured(&self, inputs: &[Tensor], train: bool) -> Result<(Vec<Tensor>, String)> {
        self.run_forward(inputs, train, true)
    }

    fn run_forward(&self, inputs: &[Tensor], train: bool, structure: bool) -> Result<(Vec<Tensor>, String)> {
        let ins = tensor_ptrs(inputs);
        let mut array = ptr::null_mut();
        let mut n = 0;
        let mut text = ptr::null_mut();
        let text_slot = if structure { &mut text as *mut *mut c_char } else { ptr::null_mut() };
        // SAFETY: live module and inputs; on success the shim writes a malloc'd array of `n`
        // new tensors, which we adopt and then free the array, and (when asked) a malloc'd
        // string that take_string frees.
        check("jit_forward", unsafe { ns_jit_forward(self.raw, ins.as_ptr(), ins.len() as c_int, train as c_int, &mut array, &mut n, text_slot) })?;
        // SAFETY: see above.
        let tensors = unsafe { adopt_tensors(array, n.max(0) as usize) };
        // SAFETY: the array itself, malloc'd by the shim.
        unsafe { ns_free_array(array) };
        Ok((tensors, take_string(text)))
    }

    /// Makes the parameter or buffer `name` (dotted, as PyTorch's `named_parameters` writes it)
    /// the tensor `value` itself: the module then reads, and training updates, that tensor.
    /// With `check_only`, only checks that it could.
    pub(crate) fn bind(&self, name: &str, value: &Tensor, check_only: bool) -> Result<()> {
        let c_name = CString::new(name).map_err(|_| NimbleError::InvalidInput(format!("the name {name:?} contains a NUL byte")))?;
        let value = tensor_ptrs(std::slice::from_ref(value));
        // SAFETY: a live module, a NUL-terminated name and a live tensor; the shim keeps its own
        // reference to the tensor.
        check("jit_bind", unsafe { ns_jit_bind(self.raw, c_name.as_ptr(), value[0], check_only as c_int) })
    }

    /// Converts the module's floating-point parameters and buffers to `kind` (a floating-point
    /// kind).
    pub(crate) fn to_kind(&self, kind: tch::Kind) -> Result<()> {
        // c10::ScalarType's codes.
        let code = match kind {
            tch::Kind::Half => 5,
            tch::Kind::Float => 6,
            tch::Kind::Double => 7,
            tch::Kind::BFloat16 => 15,
            other => return Err(NimbleError::InvalidInput(format!("cannot convert a module to {other:?}, expected a floating-point dtype (float16, bfloat16, float32, float64)"))),
        };
        // SAFETY: a live module.
        check("jit_to", unsafe { ns_jit_to(self.raw, code) })
    }

    /// The forward's arguments after `self`: name, type, and whether it has a default.
    pub(crate) fn arguments(&self) -> Result<Vec<(String, String, bool)>> {
        let mut out = ptr::null_mut();
        // SAFETY: a live module; the shim writes a malloc'd string.
        check("jit_arguments", unsafe { ns_jit_arguments(self.raw, &mut out) })?;
        Ok(take_string(out)
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                Some((fields.next()?.to_string(), fields.next()?.to_string(), fields.next()? == "1"))
            })
            .collect())
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
