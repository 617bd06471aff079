//! `nimble-cuda` (not implemented yet): CUDA streams, events and graphs on cudarc.
//!
//! This crate will hold the torch-free CUDA layer: safe stream, event, capture and graph types
//! over cudarc (dynamic loading, so it builds without CUDA and reports `NoGpu` at run time),
//! introspection of captured graphs (node counts, parallel width), and a synthetic-kernel
//! executor that runs any `TaskGraph` with any `StreamPlan` on the GPU, eagerly or as one
//! graph, to validate `nimble-sched`'s simulator. It has no code yet and does not pretend to.
