//! The one error type of `nimble-cuda`.

use thiserror::Error;

/// What can go wrong on the CUDA path.
#[derive(Debug, Error)]
pub enum CudaError {
    /// No usable GPU: no driver library, no device, or the device could not be opened.
    #[error("no CUDA GPU available: {0}")]
    NoGpu(String),

    /// A CUDA driver call failed.
    #[error("CUDA driver error: {0}")]
    Driver(#[from] cudarc::driver::DriverError),

    /// NVRTC could not compile the synthetic kernel (or is missing).
    #[error("could not compile the synthetic kernel: {0}")]
    Compile(String),

    /// The plan does not fit the graph; run `nimble_sched::verify` for details.
    #[error("invalid plan for this graph: {0}")]
    InvalidPlan(String),

    /// A stream capture ended without producing a graph.
    #[error("stream capture produced no graph (nothing was captured on the origin stream)")]
    EmptyCapture,
}

/// The result type of `nimble-cuda`.
pub type Result<T, E = CudaError> = std::result::Result<T, E>;
