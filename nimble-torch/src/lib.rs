//! `nimble-torch` (not implemented yet): Nimble for tch-rs models.
//!
//! This crate will trace any tch forward into a `nimble_graph::TaskGraph` through libtorch's
//! RecordFunction callbacks, assign streams with `nimble-sched`, capture the whole forward as
//! one multi-stream CUDA graph through a small C++ shim (`at::cuda::CUDAGraph`), and replay it
//! (`Nimble::prepare`, `Nimble::forward`), for inference and training. It has no code yet and
//! does not pretend to: see the project's issues for its specification.
