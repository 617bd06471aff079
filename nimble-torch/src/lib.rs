//! Nimble for tch-rs models: trace any forward into a task graph, assign streams with
//! nimble-sched, capture the whole forward as one multi-stream CUDA graph, and replay it.
//!
//! ```text
//! Nimble::prepare(inputs, options)
//!   optimize   trace into TorchScript, freeze, fold BatchNorm, fuse conv(+add)+ReLU (cuDNN) and
//!              squeeze-excitation and conv tails (Nimble's own kernels), pick the layout
//!              (optional)
//!   warm-up    two eager runs (lazy init, cuDNN's algorithm search)
//!   trace      record the top-level ATen ops and the storages they read and write
//!   schedule   task graph -> nimble-sched plan (streams, syncs) for the traced issue order
//!   time ops   one gated single-stream pass with an event pair per op (duration_us)
//!   pre-run    one pass on the planned streams (per-stream library workspaces)
//!   capture    one pass on the planned streams inside at::cuda::CUDAGraph capture
//! Nimble::forward(inputs)
//!   copy into the static inputs, replay, return the static outputs
//! ```
//!
//! Training (see the `training` module's documentation): `prepare` with
//! [`PrepareOptions::training`] captures the forward and its backward as two graphs behind a
//! custom autograd function (the paper's mode), and [`Nimble::prepare_train_step`] /
//! [`Nimble::train_step`] the whole step (forward, loss, backward, fused SGD or Adam) as one.
//!
//! With grouped convolutions and no layout given, the steps run for NCHW and for NHWC, both
//! graphs are timed, and the faster is kept ([`PrepareReport::layout_trial`]). [`profile`] shows
//! what the device runs in any code, graph replays included.
//!
//! Every pass checks that its op sequence equals the traced one and fails naming the first
//! differing op; forwards that synchronize with the host (`.item()`, `nonzero`, copies to the
//! CPU) are refused with the op's name. The C++ half lives in `shim/nimble_shim.cpp`; all
//! `unsafe` is in [`ffi`](crate::ffi)'s module.

mod error;
mod ffi;
mod nimble;
pub mod profile;
pub mod trace;
mod training;

pub use error::{NimbleError, Result};
pub use nimble::{
    cuda_allocated_bytes, cuda_empty_cache, cuda_synchronize, cuda_time, relative_error, BackwardStreams, LayoutTrial, Nimble, PrepareOptions, PrepareReport, PrepareSeconds,
};
pub use profile::{profile, DeviceProfile};
pub use training::{FusedOptimizer, Loss, LossFn, Optimizer, TrainStep};
pub use nimble_cuda::CaptureMode;
pub use trace::{record, TensorDevice, TensorUse, Trace, TracedOp};

/// Whether libtorch sees a CUDA device.
pub fn cuda_available() -> bool {
    ffi::cuda_device_count().map(|n| n > 0).unwrap_or(false)
}
