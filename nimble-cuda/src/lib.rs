//! `nimble-cuda`: CUDA streams, events and graphs on cudarc, and a synthetic-kernel executor.
//!
//! The torch-free CUDA layer. It loads the driver dynamically, so it builds anywhere; on a
//! machine without a driver every entry point returns [`CudaError::NoGpu`] instead of panicking
//! ([`Gpu::probe`] checks first). [`Gpu`] opens a device and hands out streams (with
//! priorities) and events (timing or not); [`capture`] records a stream's work in any
//! [`CaptureMode`] into a [`Graph`], which launches, uploads and reports its
//! [structure](GraphStructure) (node types, edges, parallel width). [`launch_sequence`] turns a
//! `StreamPlan` into the steps an executor issues (pure, tested on the CPU), and
//! [`SyntheticExecutor`] runs any task graph with any plan using [`SpinKernel`], eagerly or as one
//! graph, to measure what `nimble-sched`'s simulator predicts. All `unsafe` code lives in the
//! private `ffi` module.

mod device;
mod error;
mod ffi;
pub mod measure;
mod sequence;
mod synthetic;

/// Raw driver types other owners hand over (e.g. a libtorch `CUDAGraph`'s graph, for
/// [`GraphStructure::from_raw`]).
pub mod sys {
    pub use cudarc::driver::sys::CUgraph;
}

pub use device::{capture, CaptureMode, DeviceInfo, Gpu, Graph, GraphStructure};
pub use error::{CudaError, Result};
pub use measure::Samples;
pub use sequence::{launch_sequence, recorded_nodes, LaunchStep};
pub use synthetic::{SpinKernel, SyntheticExecutor};
