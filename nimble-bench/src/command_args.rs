//! The arguments and data that a command's rendering half and its measuring half (the latter
//! only with the `torch` feature) share: defined here, below both, so neither imports the other
//! back.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How a figure command runs: the measuring method, and where its record and figure go.
#[cfg_attr(not(feature = "torch"), allow(dead_code))] // read only when measuring, which needs libtorch
pub struct Rendering {
    pub warmup: usize,
    pub iterations: usize,
    /// Re-render from the record instead of measuring.
    pub from_results: bool,
    pub results: PathBuf,
    pub out_dir: PathBuf,
}

/// What a figure command measures on a GPU.
#[cfg_attr(not(feature = "torch"), allow(dead_code))] // read only when measuring, which needs libtorch
pub enum Measurement<'a> {
    /// The inference comparison of the zoo models in `models` at batch `batch`.
    Inference { models: &'a str, batch: i64 },
    /// The training comparison of `models` at `batches`.
    Training { models: &'a str, batches: &'a [i64] },
    /// The scheduler study of `models`; then, when given, each model's kernel-timed task graph
    /// written to the directory.
    Schedulers { models: &'a str, kernel_graphs: Option<&'a Path> },
}

/// What `coverage` does: measure the models of `dir`, merge records measured in parts, or (with
/// neither) re-render from `results`.
#[cfg_attr(not(feature = "torch"), allow(dead_code))] // read only when measuring, which needs libtorch
pub struct CoverageArgs<'a> {
    pub dir: Option<&'a Path>,
    pub only: &'a [String],
    pub timeout: Duration,
    pub warmup: usize,
    pub iterations: usize,
    pub merge: &'a [PathBuf],
    pub results: &'a Path,
    pub out_dir: &'a Path,
}
