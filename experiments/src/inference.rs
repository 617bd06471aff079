//! The inference comparison: a model's latency eagerly (tch), as a single-stream CUDA graph
//! (Nimble with the `single` plan) and as Nimble's multi-stream CUDA graph, measured the
//! paper's way.
//!
//! Method: cuDNN benchmark mode on for every system, fresh standard-normal inputs for every
//! run, `warmup` untimed runs, then `iterations` runs each timed with CUDA events around the
//! call on the current stream (for the graphs: copying the input in and replaying), the median
//! reported. Before timing, each prepared model's output on a fresh input is compared with the
//! eager tch model's on the same input.

use nimble_cuda::Samples;
use nimble_torch::{cuda_synchronize, cuda_time, Nimble, PrepareOptions, PrepareReport};
use serde::Serialize;
use tch::Tensor;

use crate::models::Model;
use crate::record::Provenance;

/// The libtorch every measurement runs on (torch-sys =0.24.0 refuses any other).
pub const LIBTORCH_VERSION: &str = "2.11.0";

/// How one model is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InferMode {
    /// tch eager, as written.
    Eager,
    /// One CUDA graph on one stream (the paper's single-stream Nimble).
    Graph,
    /// One CUDA graph on the streams of the chosen algorithm.
    Nimble,
}

impl InferMode {
    pub fn name(self) -> &'static str {
        match self {
            InferMode::Eager => "eager",
            InferMode::Graph => "graph",
            InferMode::Nimble => "nimble",
        }
    }
}

/// What every run of an experiment shares.
#[derive(Clone, Debug)]
pub struct InferConfig {
    pub batch: i64,
    pub warmup: usize,
    pub iterations: usize,
    /// The algorithm of `InferMode::Nimble`.
    pub algorithm: String,
    /// With the inference rewrites: fuse conv(+add)+ReLU, and use the channels-last layout.
    pub fuse_conv_relu: bool,
    pub channels_last: bool,
}

/// One measured configuration.
#[derive(Clone, Debug, Serialize)]
pub struct InferRow {
    pub model: String,
    pub batch: i64,
    pub mode: InferMode,
    /// The inference rewrites were applied (graph modes only).
    pub optimized: bool,
    /// Latency per forward, microseconds.
    pub latency: Samples,
    /// max |output − eager tch output| / max |eager tch output| on one fresh input (graph modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relative_error: Option<f64>,
    /// What prepare built and how long it took (graph modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepare: Option<PrepareReport>,
    /// With `optimized`: conv(+add)+ReLU fused, channels-last layout.
    pub fuse_conv_relu: bool,
    pub channels_last: bool,
}

/// A whole comparison, as committed under `paper-figs/results/`.
#[derive(Clone, Debug, Serialize)]
pub struct InferRecord {
    pub experiment: &'static str,
    pub provenance: Provenance,
    pub libtorch: &'static str,
    pub precision: &'static str,
    pub rows: Vec<InferRow>,
}

/// Times `run` the paper's way on fresh inputs from `input`.
pub fn time_runs(
    warmup: usize,
    iterations: usize,
    mut input: impl FnMut() -> Tensor,
    mut run: impl FnMut(&Tensor) -> nimble_torch::Result<()>,
) -> nimble_torch::Result<Samples> {
    for _ in 0..warmup {
        let x = input();
        run(&x)?;
    }
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let x = input();
        cuda_synchronize()?;
        samples.push(cuda_time(|| run(&x))? * 1000.0);
    }
    Ok(Samples::new(samples))
}

/// max |a − b| / max |b|.
pub fn relative_error(output: &Tensor, reference: &Tensor) -> f64 {
    let scale = reference.abs().max().double_value(&[]).max(f64::MIN_POSITIVE);
    (output - reference).abs().max().double_value(&[]) / scale
}

/// Measures `model` eagerly.
pub fn measure_eager(model: &Model, config: &InferConfig) -> nimble_torch::Result<InferRow> {
    let forward = model.forward.clone();
    let latency = tch::no_grad(|| {
        time_runs(config.warmup, config.iterations, || model.input(config.batch), |x| {
            let _ = forward(x);
            Ok(())
        })
    })?;
    Ok(InferRow {
        model: model.info.name.into(),
        batch: config.batch,
        mode: InferMode::Eager,
        optimized: false,
        latency,
        relative_error: None,
        prepare: None,
        fuse_conv_relu: false,
        channels_last: false,
    })
}

/// Prepares `model` for `mode` (graph or nimble), checks it against eager, and measures it.
pub fn measure_prepared(model: &Model, config: &InferConfig, mode: InferMode, optimize: bool) -> nimble_torch::Result<InferRow> {
    let algorithm = match mode {
        InferMode::Graph => "single".to_string(),
        InferMode::Nimble => config.algorithm.clone(),
        InferMode::Eager => return measure_eager(model, config),
    };
    let mut nimble: Nimble = model.nimble();
    let options = PrepareOptions::inference()
        .algorithm(algorithm)
        .optimize(optimize)
        .fuse_conv_relu(config.fuse_conv_relu)
        .channels_last(config.channels_last);
    let report = nimble.prepare(&[model.input(config.batch)], options)?.clone();
    let x = model.input(config.batch);
    let reference = tch::no_grad(|| (model.forward)(&x));
    let output = nimble.forward(&[x])?.remove(0);
    let relative_error = relative_error(&output, &reference);
    let latency = time_runs(config.warmup, config.iterations, || model.input(config.batch), |x| {
        nimble.forward(std::slice::from_ref(x)).map(drop)
    })?;
    Ok(InferRow {
        model: model.info.name.into(),
        batch: config.batch,
        mode,
        optimized: optimize,
        latency,
        relative_error: Some(relative_error),
        prepare: Some(report),
        fuse_conv_relu: optimize && config.fuse_conv_relu,
        channels_last: optimize && config.channels_last,
    })
}
