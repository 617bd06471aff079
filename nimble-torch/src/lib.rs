//! Nimble for tch-rs models: trace any forward into a task graph, assign streams with
//! nimble-sched, capture the whole forward as one multi-stream CUDA graph, and replay it.
//!
//! `prepare` is a pipeline of stages, one module each, in the order data flows through them;
//! [`Nimble`] (`nimble.rs`) is a thin façade over them:
//!
//! ```text
//! source     the model: a tch closure or a TorchScript module, and its Runner   source.rs
//! optimize   TorchScript, frozen, BatchNorm folded, SiLU, cuDNN's conv(+add)+ReLU, Nimble's
//!            fused ops (squeeze-excitation, conv tails), the layout             optimize.rs
//! warm-up    two eager runs (lazy init, cuDNN's algorithm search); the output's
//!            structure (tuples, lists, dicts, None, constants)                  output.rs
//! record     the top-level ATen ops and the storages they read and write        trace.rs
//! schedule   task graph -> nimble-sched plan (streams, syncs) for the traced
//!            issue order, as the shim's per-op schedule                         schedule.rs
//! time ops   one gated single-stream pass with an event pair per op (duration_us); or,
//!            on request, each op's own kernels in a profiled one-stream graph  kernel_times.rs
//! pre-run    one pass on the planned streams (per-stream library workspaces)
//! capture    one pass on the planned streams inside at::cuda::CUDAGraph          inference.rs
//! layout     grouped convolutions (or a short prepare): both layouts timed, faster kept   layout.rs
//! replay     copy into the static inputs, replay, return the static outputs     replay.rs
//! ```
//!
//! `inference.rs` runs the stages for inference. Training (`training.rs`) runs them with a
//! training forward: `prepare` with [`PrepareOptions::training`] captures the forward and its
//! backward as two graphs behind a custom autograd function (the paper's mode), and
//! [`Nimble::prepare_train_step`] / [`Nimble::train_step`] the whole step (forward, loss,
//! backward, fused SGD or Adam from `optimizer.rs`) as one. `inputs.rs` checks inputs against the
//! device and the static inputs; `cuda.rs` holds the device utilities the experiments use;
//! [`profile`] shows what the device runs in any code, graph replays included.
//!
//! Every pass checks that its op sequence equals the traced one and fails naming the first
//! differing op; forwards that synchronize with the host (`.item()` or `nonzero` on a CUDA
//! tensor, copies to the CPU) are refused with the op's name, while shape arithmetic on CPU
//! tensors (what `torch.jit.trace` makes of `x.size(0)`) stays out of the task graph. The C++
//! half lives in `shim/` (C ABI in `shim/nimble_shim.h`, one file per concern); all `unsafe` is
//! in the [`ffi`](crate::ffi) module, one submodule per shim file.

mod cuda;
pub mod distributed;
mod error;
mod ffi;
mod inference;
mod inputs;
mod kernel_times;
mod layout;
mod nimble;
mod optimize;
mod optimizer;
mod options;
pub mod output;
pub mod profile;
mod replay;
mod schedule;
mod source;
pub mod trace;
mod training;

pub use cuda::{conv_tf32, cuda_allocated_bytes, cuda_empty_cache, cuda_synchronize, cuda_time, cuda_time_each, relative_error, set_conv_tf32};
pub use error::{NimbleError, Result};
pub use kernel_times::KERNEL_TIMING_REPLAYS;
pub use nimble::Nimble;
pub use nimble_cuda::CaptureMode;
pub use optimizer::{FusedOptimizer, Optimizer};
pub use options::{set_conv_relu, set_linear_gemm, BackwardStreams, ConvRelu, LayoutTrial, LinearGemm, PrepareOptions, PrepareReport, PrepareSeconds};
pub use output::{Layout, Value};
pub use profile::{profile, DeviceProfile, KernelLaunch, SmLimits};
pub use trace::{record, TensorDevice, TensorUse, Trace, TracedOp, TracedParam};
pub use training::{Loss, LossFn, TrainStep};

/// Whether libtorch sees a CUDA device.
pub fn cuda_available() -> bool {
    cuda_device_count() > 0
}

/// How many CUDA devices libtorch sees (0 without CUDA).
pub fn cuda_device_count() -> usize {
    ffi::cuda_device_count().unwrap_or(0)
}
