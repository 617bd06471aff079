//! The inference comparison: a model's latency eagerly (tch), as a single-stream CUDA graph
//! (Nimble with the `single` plan) and as Nimble's multi-stream CUDA graph, measured the
//! paper's way.
//!
//! Method: cuDNN benchmark mode on for every system, fresh standard-normal inputs for every
//! run, `warmup` untimed runs, then `iterations` runs each timed with CUDA events around the
//! call on the current stream (for the graphs: copying the input in and replaying), the median
//! reported, each system in its own block. Before timing, each prepared model's output on a
//! fresh input is compared with the eager tch model's on the same input, and a relative error
//! above [`RAW_TOLERANCE`] (no rewrites) or [`OPTIMIZED_TOLERANCE`] (rewrites) fails the run.

use nimble_cuda::Samples;
use nimble_torch::{cuda_synchronize, cuda_time, Nimble, PrepareOptions, PrepareReport};
use serde::Serialize;
use tch::Tensor;

pub use crate::tolerance::{LIBTORCH_VERSION, LOW_PRECISION_TOLERANCE, OPTIMIZED_TOLERANCE, RAW_TOLERANCE, TORCHSCRIPT_TOLERANCE};
use crate::record::Provenance;
use crate::subject::run_script;
pub use crate::subject::{outputs_error, Subject};

/// How one model is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum InferMode {
    /// tch eager, as written.
    Eager,
    /// The forward exported as a TorchScript file (`Nimble::export_torchscript`) and run by
    /// libtorch's TorchScript runtime through tch's `CModule`. (Records of commit a192d49 spell
    /// it `torch-script`.)
    #[serde(rename = "torchscript", alias = "torch-script")]
    TorchScript,
    /// One CUDA graph on one stream (the paper's single-stream Nimble).
    Graph,
    /// One CUDA graph on the streams of the chosen algorithm.
    Nimble,
}

impl InferMode {
    pub fn name(self) -> &'static str {
        match self {
            InferMode::Eager => "eager",
            InferMode::TorchScript => "torchscript",
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
    /// With the inference rewrites: fuse conv(+add)+ReLU; Nimble's fused kernels; channels-last
    /// layout (`None`: let the model decide, see `PrepareOptions::channels_last`).
    pub fuse_conv_relu: bool,
    pub fuse_kernels: bool,
    pub channels_last: Option<bool>,
    /// Check each prepared graph in exact float32 (TF32 convolutions off, eager's too), then
    /// prepare it again with the process's settings for timing; see [`prepare_checked`]. Without
    /// it, a graph checked in TF32 is checked again in exact float32 only when beyond the
    /// tolerance.
    pub exact_check: bool,
    /// With the rewrites: freeze on a CPU copy first (`PrepareOptions::freeze_on_host`).
    pub freeze_on_host: bool,
}

impl InferConfig {
    /// Nimble's algorithm with every rewrite and the layout decided per model (the defaults of
    /// `PrepareOptions::inference`).
    pub fn defaults(batch: i64, warmup: usize, iterations: usize) -> InferConfig {
        InferConfig { batch, warmup, iterations, algorithm: "nimble".into(), fuse_conv_relu: true, fuse_kernels: true, channels_last: None, exact_check: false, freeze_on_host: true }
    }
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
    /// max |eager output| on that input, and whether eager's output changed with the input: a
    /// check against a reference that is zero, or the same for every input, proves little.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference_scale: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_sensitive: Option<bool>,
    /// With `InferConfig::exact_check`: the timed graph's relative error against eager in the
    /// timing's precision (recorded, not judged; `relative_error` is the exact check's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timed_relative_error: Option<f64>,
    /// What prepare built and how long it took (graph modes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepare: Option<PrepareReport>,
    /// With `optimized`: conv(+add)+ReLU fused; Nimble's fused kernels on; the channels-last
    /// layout applied.
    pub fuse_conv_relu: bool,
    pub fuse_kernels: bool,
    pub channels_last: bool,
    /// Nimble rows: the critical path of the graph by its kernels' own durations, which no
    /// stream assignment can beat, and the latency over it (measured by the `floor` module).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<Floor>,
    /// Graph rows: bytes still allocated on the device once every graph this model prepared was
    /// dropped, over what was allocated before the first prepare (both after an eager run, so
    /// that eager's own cached workspaces count in both; at most 0 when dropping gives every byte
    /// back). One value for the model, on each of its graph rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated_after_drop_bytes: Option<i64>,
}

/// A whole comparison, as committed under `paper-figs/results/`.
#[derive(Clone, Debug, Serialize)]
pub struct InferRecord {
    pub experiment: &'static str,
    pub provenance: Provenance,
    pub libtorch: &'static str,
    pub precision: String,
    /// For a TorchScript file (`infer --torchscript`): the file and its inputs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub torchscript: Option<serde_json::Value>,
    pub rows: Vec<InferRow>,
}


/// One system to measure on a model: eager, or a graph mode with or without the rewrites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Variant {
    pub mode: InferMode,
    pub optimized: bool,
}

/// Measures every variant of `model`: all are prepared (and checked against the eager tch
/// model on a fresh input) first, then timed in blocks of warm-ups and timed runs, as the paper
/// did: each variant gets two blocks of `config.warmup` warm-ups and half of
/// `config.iterations` timed runs, the variants' blocks in mirrored order (A B … B A), so that a
/// drift of the GPU over the measurement favours none. (One block each, in order, made the
/// first-timed of two identical graphs about 1% faster on EfficientNet-B0. Interleaving the
/// variants run by run was tried too: it lets the other variants evict a small model's weights
/// from L2 between runs, which the baselines' numbers never paid, and slowed MobileNetV2's
/// graphs by about 12%.)
pub fn measure_model(model: &dyn Subject, config: &InferConfig, variants: &[Variant]) -> nimble_torch::Result<Vec<InferRow>> {
    let allocated = || -> nimble_torch::Result<i64> {
        model.eager(&model.inputs(config.batch))?;
        nimble_torch::cuda_synchronize()?;
        Ok(nimble_torch::cuda_allocated_bytes(0)? as i64)
    };
    let before_prepare = allocated()?;
    let mut prepared: Vec<Option<(Nimble, PrepareReport, Check)>> = Vec::new();
    let mut scripted: Vec<Option<(tch::CModule, Check)>> = Vec::new();
    for variant in variants {
        prepared.push(match variant.mode {
            InferMode::Eager | InferMode::TorchScript => None,
            mode => Some(prepare_checked(model, config, mode, variant.optimized)?),
        });
        scripted.push(match variant.mode {
            InferMode::TorchScript => Some(torchscript_checked(model, config)?),
            _ => None,
        });
    }
    let run = |index: usize, xs: &[Tensor]| -> nimble_torch::Result<()> {
        match (&prepared[index], &scripted[index]) {
            (Some((nimble, _, _)), _) => nimble.forward(xs).map(drop),
            (None, Some((module, _))) => run_script(module, xs).map(drop),
            (None, None) => model.eager(xs).map(drop),
        }
    };
    let mut samples = vec![Vec::with_capacity(config.iterations); variants.len()];
    let halves = [config.iterations.div_ceil(2), config.iterations / 2];
    for (round, &timed) in halves.iter().enumerate() {
        let order: Vec<usize> = if round == 0 { (0..variants.len()).collect() } else { (0..variants.len()).rev().collect() };
        for index in order {
            let block = InferConfig { iterations: timed, ..config.clone() };
            samples[index].extend(time_runs(model, &block, |xs| run(index, xs))?);
        }
    }
    let reports: Vec<Option<(PrepareReport, Check)>> = prepared.into_iter().map(|p| p.map(|(nimble, report, check)| {
        drop(nimble);
        (report, check)
    })).collect();
    let scripted: Vec<Option<Check>> = scripted.into_iter().map(|s| s.map(|(_module, check)| check)).collect();
    let after_drop = Some(allocated()? - before_prepare).filter(|_| reports.iter().any(Option::is_some));
    Ok(variants
        .iter()
        .zip(samples)
        .zip(reports.iter().zip(&scripted))
        .map(|((variant, times), (prepared, scripted))| {
          let check = prepared.as_ref().map(|p| p.1).or(*scripted);
          InferRow {
            model: model.name().into(),
            batch: config.batch,
            mode: variant.mode,
            optimized: variant.optimized && !matches!(variant.mode, InferMode::Eager | InferMode::TorchScript),
            latency: Samples::new(times),
            relative_error: check.map(|c| c.relative_error),
            reference_scale: check.map(|c| c.reference_scale),
            input_sensitive: check.map(|c| c.input_sensitive),
            timed_relative_error: check.and_then(|c| c.timed_relative_error),
            channels_last: prepared.as_ref().is_some_and(|p| p.0.channels_last),
            fuse_conv_relu: prepared.is_some() && variant.optimized && config.fuse_conv_relu,
            fuse_kernels: prepared.is_some() && variant.optimized && config.fuse_kernels,
            prepare: prepared.as_ref().map(|p| p.0.clone()),
            floor: None,
            allocated_after_drop_bytes: after_drop.filter(|_| prepared.is_some()),
          }
        })
        .collect())
}

/// `config.warmup` untimed runs of `run` on fresh inputs, then `config.iterations` runs each
/// timed with CUDA events on the current stream: the samples in microseconds.
pub fn time_runs(model: &dyn Subject, config: &InferConfig, run: impl Fn(&[Tensor]) -> nimble_torch::Result<()>) -> nimble_torch::Result<Vec<f64>> {
    for _ in 0..config.warmup {
        run(&model.inputs(config.batch))?;
    }
    let mut times = Vec::with_capacity(config.iterations);
    for _ in 0..config.iterations {
        let xs = model.inputs(config.batch);
        cuda_synchronize()?;
        times.push(cuda_time(|| run(&xs))? * 1000.0);
    }
    Ok(times)
}

/// The model as a TorchScript module run by libtorch's runtime through tch's `CModule`,
/// compared with the eager model on a fresh input.
pub fn torchscript_checked(model: &dyn Subject, config: &InferConfig) -> nimble_torch::Result<(tch::CModule, Check)> {
    let module = model.script_module(config.batch)?;
    let check = Check::against_eager(model, config.batch, |xs| run_script(&module, xs))?;
    let error = check.relative_error;
    let tolerance = if is_low_precision(model.kind()) { LOW_PRECISION_TOLERANCE } else { TORCHSCRIPT_TOLERANCE };
    if error > tolerance {
        return Err(nimble_torch::NimbleError::Internal(format!(
            "{} (TorchScript): output differs from eager by {error:.2e} (relative), more than {tolerance:.0e}",
            model.name()
        )));
    }
    Ok((module, check))
}

/// Prepares `model` for a graph mode and compares its output with eager on a fresh input; an
/// error above [`tolerance`] fails.
///
/// With `config.exact_check` the comparison is made in exact float32: TF32 convolutions off for
/// the graph's preparation and for eager, then that graph is dropped and the model prepared again
/// with the process's settings for timing. In TF32 (libtorch's default for convolutions) the same
/// eager model moves by up to 1e-1 on a deep network with random weights just by changing layout
/// (ResNet-152 on the H200, NCHW against channels-last), so a rewritten graph cannot be held to
/// 1e-2 against it; in float32 it is within 1e-3. The timed graph's error is kept in
/// `Check::timed_relative_error`.
///
/// Without `config.exact_check`, the graph is checked in the process's precision, and when that
/// is TF32 and the error is beyond the tolerance (timm's NASNet-A large, 4.4e-2 at 331x331), in
/// exact float32 as well: drift passes, a wrong result still fails.
pub fn prepare_checked(model: &dyn Subject, config: &InferConfig, mode: InferMode, optimize: bool) -> nimble_torch::Result<(Nimble, PrepareReport, Check)> {
    let tf32 = nimble_torch::conv_tf32()?;
    if !config.exact_check {
        let (nimble, report, check) = prepare_compared(model, config, mode, optimize, if tf32 { Judge::No } else { Judge::AsTimed })?;
        if !tf32 || check.relative_error <= tolerance(model.kind(), optimize) {
            return Ok((nimble, report, check));
        }
        let exact = exact_check(model, config, mode, optimize, tf32)?;
        return Ok((nimble, report, Check { timed_relative_error: Some(check.relative_error), ..exact }));
    }
    let check = exact_check(model, config, mode, optimize, tf32)?;
    let (nimble, report, timed) = prepare_compared(model, config, mode, optimize, Judge::No)?;
    Ok((nimble, report, Check { timed_relative_error: Some(timed.relative_error), ..check }))
}

/// The check of a graph prepared and compared with TF32 convolutions off, judged; `tf32` is
/// the setting put back afterwards.
fn exact_check(model: &dyn Subject, config: &InferConfig, mode: InferMode, optimize: bool, tf32: bool) -> nimble_torch::Result<Check> {
    nimble_torch::set_conv_tf32(false)?;
    let exact = prepare_compared(model, config, mode, optimize, Judge::InExactFloat32);
    nimble_torch::set_conv_tf32(tf32)?;
    Ok(exact?.2)
}

/// Whether [`prepare_compared`] fails above the tolerance, and in which precision it compared.
#[derive(Clone, Copy, PartialEq)]
enum Judge {
    No,
    AsTimed,
    InExactFloat32,
}

/// Prepares and compares with eager; fails above the tolerance unless `judge` is `No`.
fn prepare_compared(model: &dyn Subject, config: &InferConfig, mode: InferMode, optimize: bool, judge: Judge) -> nimble_torch::Result<(Nimble, PrepareReport, Check)> {
    let algorithm = if mode == InferMode::Graph { "single".to_string() } else { config.algorithm.clone() };
    let mut nimble = model.nimble()?;
    let options = PrepareOptions::inference()
        .algorithm(algorithm)
        .optimize(optimize)
        .fuse_conv_relu(config.fuse_conv_relu)
        .fuse_kernels(config.fuse_kernels)
        .channels_last(config.channels_last)
        .freeze_on_host(config.freeze_on_host);
    let report = nimble.prepare(&model.inputs(config.batch), options)?.clone();
    let check = Check::against_eager(model, config.batch, |xs| nimble.forward(xs))?;
    let error = check.relative_error;
    // Without the rewrites the graph runs eager's kernels; with them, folded weights round
    // differently (TF32 convolutions), so allow float32-plus-TF32 drift but not a wrong result.
    let tolerance = tolerance(model.kind(), optimize);
    if judge != Judge::No && error > tolerance {
        return Err(nimble_torch::NimbleError::Internal(format!(
            "{} ({} mode, rewrites {}): output differs from eager by {error:.2e} (relative), more than {tolerance:.0e}{}",
            model.name(),
            mode.name(),
            if optimize { "on" } else { "off" },
            if judge == Judge::InExactFloat32 { " in exact float32" } else { "" }
        )));
    }
    Ok((nimble, report, check))
}

/// A prepared model's output on a fresh input against eager's on the same input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    /// `outputs_error` of the prepared output against eager's.
    pub relative_error: f64,
    /// max |x| over eager's floating-point output tensors (0 without any).
    pub reference_scale: f64,
    /// Eager's output on a second fresh input differs from the first: a model whose output does
    /// not depend on its input (a random initialization can make one) makes the check vacuous,
    /// since a graph that never read its input would pass it too.
    pub input_sensitive: bool,
    /// When the check was made in exact float32 (`InferConfig::exact_check`): the timed graph's
    /// error against eager in the timing's precision.
    pub timed_relative_error: Option<f64>,
}

impl Check {
    /// Runs `run` and eager on one fresh input and eager on another.
    pub fn against_eager(model: &dyn Subject, batch: i64, run: impl FnOnce(&[Tensor]) -> nimble_torch::Result<Vec<Tensor>>) -> nimble_torch::Result<Check> {
        let xs = model.inputs(batch);
        let reference = model.eager(&xs)?;
        let relative_error = outputs_error(&run(&xs)?, &reference);
        let other = model.eager(&model.inputs(batch))?;
        let reference_scale = reference
            .iter()
            .filter(|t| t.is_floating_point() && t.numel() > 0)
            .map(|t| t.abs().max().double_value(&[]))
            .fold(0.0, f64::max);
        Ok(Check { relative_error, reference_scale, input_sensitive: outputs_error(&other, &reference) > 0.0, timed_relative_error: None })
    }
}

/// The largest relative error against eager a prepared model computing in `kind` may show,
/// with or without the inference rewrites. The comparison is made in that precision: eager runs
/// in it too.
pub fn tolerance(kind: tch::Kind, optimized: bool) -> f64 {
    match (is_low_precision(kind), optimized) {
        (true, _) => LOW_PRECISION_TOLERANCE,
        (false, true) => OPTIMIZED_TOLERANCE,
        (false, false) => RAW_TOLERANCE,
    }
}

fn is_low_precision(kind: tch::Kind) -> bool {
    matches!(kind, tch::Kind::Half | tch::Kind::BFloat16)
}

/// A model's floor beside a measured latency.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Floor {
    /// The critical path by kernel-derived durations, microseconds.
    pub floor_us: f64,
    /// The measured median latency over `floor_us`.
    pub over_floor: f64,
    /// Every op's kernel time added up: the one-stream replay's work, microseconds.
    pub kernel_time_us: f64,
    /// Tasks on the critical path, and in the graph.
    pub path_tasks: usize,
    pub tasks: usize,
}

impl Floor {
    /// The floor of `graph` (kernel-timed) against `latency_us`.
    ///
    /// # Errors
    /// When the graph has no durations (nothing to take a critical path of).
    pub fn of(graph: &nimble_graph::TaskGraph, latency_us: f64) -> nimble_torch::Result<Floor> {
        let path = graph.critical_path();
        if path.length_us <= 0.0 {
            return Err(nimble_torch::NimbleError::InvalidInput(format!(
                "the floor needs a kernel-timed task graph, but this one's {} tasks have no durations",
                graph.len()
            )));
        }
        Ok(Floor {
            floor_us: path.length_us,
            over_floor: latency_us / path.length_us,
            kernel_time_us: graph.nodes().iter().filter_map(|n| n.duration_us).sum(),
            path_tasks: path.nodes.len(),
            tasks: graph.len(),
        })
    }
}
