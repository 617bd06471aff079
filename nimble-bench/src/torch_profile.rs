//! `profile`: what the device runs in one forward of a prepared model, from a CUPTI trace.

use std::path::Path;

use anyhow::{Context, Result};
use experiments::inference::{self, InferConfig, InferMode, Subject, LIBTORCH_VERSION};
use experiments::record::Provenance;
use nimble_cuda::Gpu;
use tch::Device;

use crate::output::{emit, write_file};
use crate::torch::{check_config, for_each_model, model_names, open_gpu, provenance_line, Models, PRECISION};

/// What `profile` runs; `config` as for `infer` (its warm-ups and timed runs give the
/// unprofiled latency).
pub struct ProfileArgs<'a> {
    pub models: Models<'a>,
    pub mode: InferMode,
    pub optimize: bool,
    pub config: InferConfig,
    pub runs: usize,
    pub top: usize,
    pub trace: Option<&'a Path>,
    pub out: Option<&'a Path>,
}

/// The device sits idle this long between profiled runs (the host sleeps after synchronizing),
/// and any idle stretch of half of it splits runs.
const PROFILE_PAUSE: std::time::Duration = std::time::Duration::from_millis(2);

/// `profile`: what the device runs in one forward of a prepared model (kernels, copies), each
/// run's span against the time the device was busy, and the kernels that take the most time.
pub fn profile(args: &ProfileArgs<'_>) -> Result<()> {
    check_config(&args.config)?;
    anyhow::ensure!(args.runs >= 1, "--runs must be at least 1");
    anyhow::ensure!(args.mode != InferMode::TorchScript, "--mode torchscript is not profiled; use eager, graph or nimble");
    args.models.check()?;
    if let Models::Zoo { list, .. } = args.models {
        anyhow::ensure!(model_names(list)?.len() == 1, "--model names one model, got {list}");
    }
    let gpu = open_gpu("profile", "")?;
    for_each_model(args.models, Device::Cuda(0), |_| {}, |model| profile_model(args, &gpu, model))
}

fn profile_model(args: &ProfileArgs<'_>, gpu: &Gpu, model: &dyn Subject) -> Result<()> {
    let name = model.name();
    let config = &args.config;
    let prepared = match args.mode {
        InferMode::Eager => None,
        mode => Some(inference::prepare_checked(model, config, mode, args.optimize).with_context(|| format!("preparing {name}"))?),
    };
    let run = |xs: &[tch::Tensor]| -> nimble_torch::Result<()> {
        match &prepared {
            Some((nimble, _, _)) => nimble.forward(xs).map(drop),
            None => model.eager(xs).map(drop),
        }
    };
    // The unprofiled latency first (the paper's method), for comparison with the profiled span.
    let latency = nimble_cuda::Samples::new(inference::time_runs(model, config, run)?);
    let inputs: Vec<Vec<tch::Tensor>> = (0..args.runs).map(|_| model.inputs(config.batch)).collect();
    nimble_torch::cuda_synchronize()?;
    let partial = args.trace.map(|p| p.with_extension("partial.json"));
    let ((), device) = nimble_torch::profile(partial.as_deref(), || {
        for x in &inputs {
            run(x)?;
            nimble_torch::cuda_synchronize()?;
            std::thread::sleep(PROFILE_PAUSE);
        }
        Ok(())
    })?;
    if let (Some(partial), Some(path)) = (&partial, args.trace) {
        std::fs::rename(partial, path).with_context(|| format!("moving the Chrome trace to {}", path.display()))?;
    }
    let runs = device.runs(PROFILE_PAUSE.as_nanos() as u64 / 2);
    anyhow::ensure!(
        runs.len() == args.runs,
        "the profile split into {} runs where {} ran; CUPTI may have dropped records",
        runs.len(),
        args.runs
    );
    let median = |f: fn(&nimble_torch::profile::RunStats) -> f64| nimble_cuda::Samples::new(runs.iter().map(f).collect()).median_us;
    let names = device.by_name();
    let provenance = Provenance::now(
        gpu.info(),
        config.warmup,
        config.iterations,
        "unprofiled latency: fresh randn inputs, CUDA events around each call, median; then each profiled run alone (synchronize and 2 ms idle between runs), Kineto/CUPTI device activity records",
    );
    let record = serde_json::json!({
        "experiment": "profile",
        "provenance": &provenance,
        "libtorch": LIBTORCH_VERSION,
        "precision": PRECISION,
        "model": name, "mode": args.mode, "batch": config.batch, "optimized": args.optimize && args.mode != InferMode::Eager,
        "fuse_conv_relu": config.fuse_conv_relu, "fuse_kernels": config.fuse_kernels,
        "prepare": prepared.as_ref().map(|p| &p.1),
        "latency": &latency,
        "runs": &runs,
        "names": &names,
    });
    if let Some(path) = args.out {
        write_file(path, &serde_json::to_string_pretty(&record)?)?;
    }
    let per_run = args.runs as f64;
    let busy = median(|r| r.busy_us);
    let mut lines = vec![
        provenance_line(&provenance, LIBTORCH_VERSION, &format!("{name} {} batch {}", args.mode.name(), config.batch)),
        format!(
            "unprofiled latency {:.3} ms; per profiled run (median of {}): {} kernels, {} activities, span {:.1} us, device busy {:.1} us, work {:.1} us, {} stream(s)",
            latency.median_us / 1000.0,
            args.runs,
            median(|r| r.kernels as f64),
            median(|r| r.activities as f64),
            median(|r| r.span_us),
            busy,
            median(|r| r.work_us),
            median(|r| r.streams as f64),
        ),
        format!("{:>7} {:>9} {:>8} {:>6}  {}", "per run", "us/run", "mean us", "busy%", "kernel (or copy)"),
    ];
    for n in names.iter().take(args.top) {
        let name = if n.name.chars().count() > 110 { format!("{}…", n.name.chars().take(110).collect::<String>()) } else { n.name.clone() };
        lines.push(format!(
            "{:>7.1} {:>9.1} {:>8.2} {:>6.1}  {}",
            n.count as f64 / per_run,
            n.total_us / per_run,
            n.mean_us,
            100.0 * n.total_us / per_run / busy,
            name
        ));
    }
    if names.len() > args.top {
        let rest: f64 = names[args.top..].iter().map(|n| n.total_us).sum::<f64>() / per_run;
        lines.push(format!("{:>7.1} {:>9.1} {:>8} {:>6.1}  ({} more names)", names[args.top..].iter().map(|n| n.count).sum::<usize>() as f64 / per_run, rest, "", 100.0 * rest / busy, names.len() - args.top));
    }
    emit(&lines.join("\n"))
}
