//! The checks of a forward's inputs: against the device before `prepare`, and against a prepared
//! graph's static inputs before each replay, which they are copied into.

use tch::{Device, Tensor};

use crate::error::{NimbleError, Result};
use crate::ffi;
use crate::options::PrepareOptions;

/// The checks every `prepare` starts with: inputs given, a CUDA device, all inputs on it, a
/// known algorithm. Turns cuDNN's benchmark mode on when asked. Returns the device and the
/// assigner.
pub(crate) fn check_cuda_prepare(inputs: &[Tensor], options: &PrepareOptions) -> Result<(usize, Box<dyn nimble_sched::StreamAssigner>)> {
    check_inputs_given(inputs)?;
    if ffi::cuda_device_count()? == 0 {
        return Err(NimbleError::NoCuda);
    }
    let device = cuda_device_of(inputs)?;
    let assigner = nimble_sched::algorithms::by_name(&options.algorithm)?;
    if options.cudnn_benchmark {
        tch::Cuda::cudnn_set_benchmark(true);
    }
    Ok((device, assigner))
}

/// Copies `inputs` into a prepared graph's static inputs, after checking them against those.
pub(crate) fn copy_into(targets: &[Tensor], inputs: &[Tensor]) -> Result<()> {
    check_like(inputs, targets)?;
    for (target, input) in targets.iter().zip(inputs) {
        let mut target = target.shallow_clone();
        target.f_copy_(input).map_err(|e| NimbleError::Torch { call: "copy_", message: e.to_string() })?;
    }
    Ok(())
}

pub(crate) fn check_inputs_given(inputs: &[Tensor]) -> Result<()> {
    if inputs.is_empty() {
        return Err(NimbleError::InvalidInput("no input tensors given: pass the forward's inputs (shapes matter, values do not)".into()));
    }
    Ok(())
}

/// The CUDA device all inputs are on.
fn cuda_device_of(inputs: &[Tensor]) -> Result<usize> {
    let mut device = None;
    for (index, input) in inputs.iter().enumerate() {
        match input.device() {
            Device::Cuda(d) if device.is_none() || device == Some(d) => device = Some(d),
            Device::Cuda(d) => {
                return Err(NimbleError::InvalidInput(format!("input {index} is on cuda:{d}, expected cuda:{} like input 0", device.unwrap_or(0))))
            }
            other => {
                return Err(NimbleError::InvalidInput(format!(
                    "input {index} is on {other:?}, expected a CUDA device: prepare captures a CUDA graph (move the model and its inputs to CUDA)"
                )))
            }
        }
    }
    device.ok_or_else(|| NimbleError::InvalidInput("no input tensors given".into()))
}

/// Checks `inputs` against the static inputs: count, device, dtype, shape.
fn check_like(inputs: &[Tensor], expected: &[Tensor]) -> Result<()> {
    if inputs.len() != expected.len() {
        return Err(NimbleError::InputCount { expected: expected.len(), got: inputs.len() });
    }
    for (index, (got, want)) in inputs.iter().zip(expected).enumerate() {
        let mismatch = |what, expected: String, got: String| Err(NimbleError::InputMismatch { index, what, expected, got });
        if !got.defined() {
            return mismatch("the tensor", "a defined tensor".into(), "undefined".into());
        }
        if got.device() != want.device() {
            return mismatch("the device", format!("{:?}", want.device()), format!("{:?}", got.device()));
        }
        if got.kind() != want.kind() {
            return mismatch("the dtype", format!("{:?}", want.kind()), format!("{:?}", got.kind()));
        }
        if got.size() != want.size() {
            return mismatch("the shape", format!("{:?}", want.size()), format!("{:?}", got.size()));
        }
    }
    Ok(())
}
