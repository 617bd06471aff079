//! Stage 1, optimize: the forward traced into TorchScript, frozen, and rewritten for inference
//! (BatchNorm folded, SiLU, cuDNN's conv(+add)+ReLU fusion, Nimble's fused ops, the layout).

use std::cell::Cell;

use tch::Tensor;

use crate::error::{NimbleError, Result};
use crate::ffi::{Applied, JitModule, Rewrites};
use crate::source::{Runner, Source};

/// The rewrites of `trace` and `run_optimized`: those prepare applies by default, less cuDNN's
/// fusions and the channels-last layout (CUDA-only choices that change no op's meaning).
pub(crate) const TRACE_REWRITES: Rewrites = Rewrites { fuse_conv_relu: false, fuse_kernels: true, channels_last: Some(false), freeze_on_host: false, fold_half_precision: false };

/// The forward of `source` as a frozen, optimized TorchScript module, run twice (the first runs
/// of a TorchScript module differ: profiling), and what the rewrites did.
pub(crate) fn optimized_module(source: &Source, inputs: &[Tensor], rewrites: &Rewrites) -> Result<(JitModule, Applied)> {
    let mut rewrites = *rewrites;
    if !inputs.iter().any(|t| t.device().is_cuda()) {
        (rewrites.fuse_conv_relu, rewrites.channels_last) = (false, Some(false));
    }
    let explain = |e: NimbleError| match e {
        NimbleError::Torch { message, .. } | NimbleError::ForwardFailed { message, .. } if message.contains("requires grad") => NimbleError::InvalidInput(format!(
            "the inference rewrites trace the forward into TorchScript, which cannot take parameters that require gradients: \
             call `freeze()` on the model's VarStore, or prepare with `optimize(false)` ({message})"
        )),
        other => other,
    };
    let mut traced = None;
    let module = source.as_torchscript(inputs, &mut traced).map_err(explain)?;
    let frozen_on_host = Cell::new(false);
    let optimized_and_run = |rewrites: &Rewrites| -> Result<(JitModule, Applied)> {
        let (optimized, applied) = module.optimized(rewrites)?;
        frozen_on_host.set(applied.frozen_on_host);
        match warm_up(&optimized, inputs) {
            Ok(()) => Ok((optimized, applied)),
            // Left to decide, the layout must not refuse a model: channels-last outputs break a
            // model's `view` of a convolution's output (which needs the contiguous layout), so
            // such a model keeps NCHW.
            Err(_) if applied.channels_last && rewrites.channels_last.is_none() => {
                let (optimized, nchw) = module.optimized(&Rewrites { channels_last: Some(false), ..*rewrites })?;
                warm_up(&optimized, inputs)?;
                // No layout trial either: it would only fail the same way.
                Ok((optimized, Applied { convs: false, ..nchw }))
            }
            Err(e) => Err(e),
        }
    };
    match optimized_and_run(&rewrites) {
        // Frozen on a CPU copy, a constant the GPU would have kept can stay on the CPU and meet
        // a GPU tensor in an op that needs one device (the shim's freeze.cpp): frozen where the
        // module lives, the forward is what it would have been without that speed-up.
        Err(_) if frozen_on_host.get() => optimized_and_run(&Rewrites { freeze_on_host: false, ..rewrites }),
        done => done,
    }
}

/// `module` (the rewritten forward, else the TorchScript source) with each value the host
/// computes from constants and the inputs' shapes and copies to the device made a constant
/// computed on `inputs` (the shim's `host_values.cpp`), and how many it folded; `module` as it
/// was when there are none (or the source is a Rust forward). A CUDA graph cannot capture such a
/// copy, and on the graph's fixed shapes the value never changes.
pub(crate) fn with_host_values_folded(source: &Source, module: Option<JitModule>, inputs: &[Tensor]) -> Result<(Option<JitModule>, usize)> {
    let base = match (&module, source) {
        (Some(module), _) => module,
        (None, Source::TorchScript(module)) => module,
        (None, Source::Rust(_)) => return Ok((module, 0)),
    };
    Ok(match base.with_host_values_folded(inputs)? {
        Some((folded, count)) => (Some(folded), count),
        None => (module, 0),
    })
}

fn warm_up(module: &JitModule, inputs: &[Tensor]) -> Result<()> {
    for _ in 0..2 {
        Runner::Jit(module).run_caught(inputs, false, "TorchScript warm-up")?;
    }
    Ok(())
}
