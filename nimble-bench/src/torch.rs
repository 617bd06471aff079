//! Commands over real models through nimble-torch: `export-graph` (any machine) and `infer`
//! (GPU).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use experiments::floor;
use experiments::inference::{self, InferConfig, InferMode, InferRecord, InferRow, Subject, Variant, LIBTORCH_VERSION};
use experiments::models::{self, Dataset};
use experiments::record::Provenance;
use experiments::torchscript::{InputSpec, TorchScriptModel};
use nimble_cuda::Gpu;
use nimble_torch::PrepareOptions;
use tch::{Device, Kind};

use crate::output::{emit, emit_json, note, progress, write_file};

/// Where `export-graph` traces.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum TraceDevice {
    Cpu,
    Cuda,
}

/// Whether `infer` applies the inference rewrites.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Optimize {
    On,
    Off,
    /// both, one row each
    Both,
}

/// On, off, or decided per model.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Switch {
    On,
    Off,
    Auto,
}

impl Switch {
    pub fn choice(self) -> Option<bool> {
        match self {
            Switch::On => Some(true),
            Switch::Off => Some(false),
            Switch::Auto => None,
        }
    }
}

/// What every measured record says about its numbers' precision.
pub(crate) const PRECISION: &str = "float32 (libtorch defaults: TF32 for cuDNN convolutions)";

/// The GPU a measuring command runs on, with cuDNN's benchmark mode on (the paper's method), or
/// an error saying that `command` needs one (`hint` appended).
pub(crate) fn open_gpu(command: &str, hint: &str) -> Result<Gpu> {
    if !nimble_torch::cuda_available() {
        bail!("{command} needs a CUDA device and libtorch sees none{hint}");
    }
    let gpu = Gpu::open(0).context("opening the GPU for its description")?;
    tch::Cuda::cudnn_set_benchmark(true);
    Ok(gpu)
}

/// A table's first line: where, with what and how the numbers were measured.
pub(crate) fn provenance_line(p: &Provenance, libtorch: &str, what: &str) -> String {
    format!(
        "{} (driver {}, CUDA {}), libtorch {}, {what}, median of {} after {} warm-ups, ms; commit {}",
        p.gpu,
        p.driver_version.as_deref().unwrap_or("?"),
        p.driver_cuda_version,
        libtorch,
        p.iterations,
        p.warmup,
        p.commit
    )
}

pub(crate) fn model_names(list: &str) -> Result<Vec<&'static str>> {
    let names: Vec<&str> = if list == "all" { models::MODELS.iter().map(|m| m.name).collect() } else { list.split(',').map(str::trim).collect() };
    names.into_iter().map(|name| models::info(name).map(|m| m.name).map_err(anyhow::Error::msg)).collect()
}

/// Builds a registered ImageNet model, with weights from `weights` when given.
pub(crate) fn build_model(name: &str, device: Device, weights: Option<&Path>) -> Result<models::Model> {
    let mut model = models::build(name, Dataset::ImageNet, device).map_err(anyhow::Error::msg)?;
    if let Some(path) = weights {
        model.load(path).map_err(anyhow::Error::msg)?;
    }
    Ok(model)
}

/// What `infer`, `profile` and `export-graph` run: zoo models, or any TorchScript file.
#[derive(Clone, Copy, Debug)]
pub enum Models<'a> {
    /// Comma-separated zoo names or `all`; `weights` for exactly one of them; `dtype` converts
    /// the models' parameters and inputs.
    Zoo { list: &'a str, weights: Option<&'a Path>, dtype: Option<Kind> },
    /// A TorchScript file with one input specification per forward argument; `dtype` converts
    /// its floating-point parameters and inputs.
    TorchScript { path: &'a Path, inputs: &'a [InputSpec], dtype: Option<Kind> },
}

impl Models<'_> {
    /// The TorchScript file's model on `device`, its inputs checked against its forward (after
    /// `check`, which every command runs before it looks for a GPU).
    fn torchscript(path: &Path, inputs: &[InputSpec], device: Device, dtype: Option<Kind>) -> Result<TorchScriptModel> {
        TorchScriptModel::load(path, inputs.to_vec(), device, dtype).map_err(anyhow::Error::msg)
    }

    /// Checks what needs no GPU: zoo names, `--weights` with one model, the file's existence.
    pub(crate) fn check(&self) -> Result<()> {
        match *self {
            Models::Zoo { list, weights, .. } => {
                let names = model_names(list)?;
                anyhow::ensure!(weights.is_none() || names.len() == 1, "--weights loads one model's weights: name exactly one model");
            }
            Models::TorchScript { path, inputs, .. } => {
                experiments::torchscript::check_file(path).map_err(anyhow::Error::msg)?;
                anyhow::ensure!(!inputs.is_empty(), "--torchscript needs one --input SHAPE[:DTYPE[:LOW:HIGH]] per forward argument, e.g. --input 1x3x224x224");
            }
        }
        Ok(())
    }
}

/// Runs `body` on each model of `models`, built on `device`, each from an empty allocator cache
/// and seed 0 (as in a process of its own: the previous model's freed graph pools would
/// otherwise decide where this one's land); `name` is told first.
pub(crate) fn for_each_model(models: Models<'_>, device: Device, mut name: impl FnMut(&str), mut body: impl FnMut(&dyn Subject) -> Result<()>) -> Result<()> {
    let fresh = || -> Result<()> {
        if device.is_cuda() {
            nimble_torch::cuda_synchronize()?;
            nimble_torch::cuda_empty_cache()?;
        }
        tch::manual_seed(0);
        Ok(())
    };
    match models {
        Models::Zoo { list, weights, dtype } => {
            for model_name in model_names(list)? {
                name(model_name);
                fresh()?;
                let mut model = build_model(model_name, device, weights)?;
                if let Some(kind) = dtype {
                    model.set_kind(kind);
                }
                body(&model)?;
            }
        }
        Models::TorchScript { path, inputs, dtype } => {
            name(&path.display().to_string());
            fresh()?;
            body(&Models::torchscript(path, inputs, device, dtype)?)?;
        }
    }
    Ok(())
}

/// `models`: the registry, with parameter counts (and, with `trace`, task-graph structure).
pub fn list_models(dataset: Dataset, trace: bool, json: bool) -> Result<()> {
    let mut rows = Vec::new();
    for info in models::MODELS.iter().filter(|m| !m.batch_sizes(dataset).is_empty()) {
        let model = models::build(info.name, dataset, Device::Cpu).map_err(anyhow::Error::msg)?;
        let params = model.parameter_count();
        let stats = if trace { Some(model.graph_stats(1).with_context(|| format!("tracing {}", info.name))?) } else { None };
        rows.push((*info, model.info.input_shape(dataset, 1), params, stats));
    }
    if json {
        let list: Vec<_> = rows
            .iter()
            .map(|(info, shape, params, stats)| {
                serde_json::json!({
                    "name": info.name, "title": info.title, "dataset": dataset, "input_shape": &shape[1..],
                    "classes": dataset.classes(), "batch_sizes": info.batch_sizes(dataset), "parameters": params, "reference": info.reference,
                    "reference_parameters": (dataset == Dataset::ImageNet).then_some(info.reference_params),
                    "reference_ops": info.reference_ops, "training": info.training, "graph": stats,
                })
            })
            .collect();
        return emit_json(&serde_json::Value::Array(list));
    }
    let mut lines = vec![format!("{:<16} {:<16} {:>11} {:>9} {:>12}  {}", "name", "model", "input", "batch", "parameters", if trace { "ops  tasks  edges  width  reference" } else { "reference" })];
    for (info, shape, params, stats) in rows {
        let graph = stats.map_or(String::new(), |g| format!("{:>4} {:>6} {:>6} {:>6}  ", g.ops, g.tasks, g.edges, g.width));
        let batches = info.batch_sizes(dataset).iter().map(i64::to_string).collect::<Vec<_>>().join("/");
        lines.push(format!("{:<16} {:<16} {:>11} {:>9} {:>12}  {graph}{}", info.name, info.title, format!("{}x{}x{}", shape[1], shape[2], shape[3]), batches, params, info.reference));
    }
    emit(&lines.join("\n"))
}

/// `export-graph`: trace a model and write its task graph as JSON; with `check`, first compares
/// what the graph computes with the model's eager forward on a fresh input (on the CPU, the
/// rewritten forward: the rewrites checked with no GPU).
pub fn export_graph(models: Models<'_>, batch: i64, device: TraceDevice, optimize: bool, check: bool, out: Option<&PathBuf>) -> Result<()> {
    anyhow::ensure!(batch >= 1, "--batch must be at least 1, got {batch}");
    anyhow::ensure!(
        !check || optimize || matches!(device, TraceDevice::Cuda),
        "--check on --device cpu compares the rewritten forward with eager: add --optimize (without it the trace is of the eager forward itself)"
    );
    models.check()?;
    if let Models::Zoo { list, .. } = models {
        anyhow::ensure!(model_names(list)?.len() == 1, "--model names one model, got {list}");
    }
    let device = match device {
        TraceDevice::Cpu => Device::Cpu,
        TraceDevice::Cuda if nimble_torch::cuda_available() => Device::Cuda(0),
        TraceDevice::Cuda => bail!("--device cuda: no CUDA device (libtorch reports CUDA unavailable); --device cpu traces without one"),
    };
    for_each_model(models, device, |_| {}, |model| {
        let mut nimble = model.nimble()?;
        let inputs = model.inputs(batch);
        let graph = if device.is_cuda() {
            // Prepared on the GPU: the graph carries each op's measured GPU time.
            nimble.prepare(&inputs, PrepareOptions::inference().optimize(optimize))?;
            nimble.task_graph().expect("prepared").clone()
        } else {
            nimble.trace(&inputs, optimize)?.task_graph()?
        };
        if check {
            check_against_eager(model, batch, optimize, |xs| if device.is_cuda() { nimble.forward(xs) } else { nimble.run_optimized(xs) })?;
        }
        let text = graph.to_json_string();
        match out {
            Some(path) => {
                write_file(path, &text)?;
                eprintln!("{}: {} tasks, {} edges -> {}", model.name(), graph.len(), graph.edge_count(), path.display());
                Ok(())
            }
            None => emit(&text),
        }
    })
}

/// `export-graph --check`: `run`'s output against the model's eager forward on a fresh input,
/// printed (with a warning when eager's output is the same for two inputs, which makes the check
/// prove little), and an error beyond the check's tolerance refused.
fn check_against_eager(model: &dyn Subject, batch: i64, optimized: bool, run: impl FnOnce(&[tch::Tensor]) -> nimble_torch::Result<Vec<tch::Tensor>>) -> Result<()> {
    let check = inference::Check::against_eager(model, batch, run)?;
    let tolerance = inference::tolerance(model.kind(), optimized);
    let error = check.relative_error;
    eprintln!(
        "{}: relative error {error:.1e} against eager (tolerance {tolerance:.0e}; eager's largest output {:.1e}{})",
        model.name(),
        check.reference_scale,
        if check.input_sensitive { "" } else { ", the same for two inputs: the check proves little" }
    );
    anyhow::ensure!(error <= tolerance, "{}: the graph's output differs from eager's by {error:.2e} (relative), more than {tolerance:.0e}", model.name());
    Ok(())
}

/// What `infer` measures; `config` holds the batch, the algorithm, the rewrites' choices and
/// the warm-ups and timed runs.
pub struct InferArgs<'a> {
    pub models: Models<'a>,
    pub modes: &'a [InferMode],
    pub optimize: Optimize,
    pub config: InferConfig,
    pub out: Option<&'a Path>,
    /// Measure each Nimble row's floor after the timing, and write the kernel-timed graphs here.
    pub floor: bool,
    pub floor_graphs: Option<&'a Path>,
}

/// The checks `infer` and `profile` make of their configuration before looking for a GPU.
pub(crate) fn check_config(config: &InferConfig) -> Result<()> {
    anyhow::ensure!(config.batch >= 1, "--batch must be at least 1");
    anyhow::ensure!(config.iterations >= 1, "--iters must be at least 1");
    nimble_sched::algorithms::by_name(&config.algorithm)?;
    Ok(())
}

/// `infer`: eager / single-stream graph / Nimble latency per model, checked against eager.
pub fn infer(args: &InferArgs<'_>) -> Result<()> {
    check_config(&args.config)?;
    args.models.check()?;
    if let Models::TorchScript { .. } = args.models {
        anyhow::ensure!(args.config.batch == 1, "--batch applies to zoo models; a TorchScript file's batch is in its --input shapes");
    }
    let count = match args.models {
        Models::Zoo { list, .. } => model_names(list)?.len(),
        Models::TorchScript { .. } => 1,
    };
    let gpu = open_gpu("infer", " (export-graph --device cpu works without one)")?;
    let config = &args.config;
    let optimize: &[bool] = match args.optimize {
        Optimize::On => &[true],
        Optimize::Off => &[false],
        Optimize::Both => &[true, false],
    };
    let mut variants = Vec::new();
    for &mode in args.modes {
        let settings: &[bool] = if matches!(mode, InferMode::Eager | InferMode::TorchScript) { &[false] } else { optimize };
        variants.extend(settings.iter().map(|&optimized| Variant { mode, optimized }));
    }
    let mut rows = Vec::new();
    let bar = progress(count, "infer");
    for_each_model(args.models, Device::Cuda(0), |name| bar.set_message(name.to_string()), |model| {
        let measured = inference::measure_model(model, config, &variants).with_context(|| format!("measuring {}", model.name()))?;
        for row in measured {
            note(&bar, &format!("  {}", row_line(&row)));
            rows.push(row);
        }
        bar.inc(1);
        Ok(())
    })?;
    bar.finish_and_clear();
    if args.floor && rows.iter().any(|r| r.mode == InferMode::Nimble) {
        add_floors(args.models, config, &mut rows, args.floor_graphs)?;
    }
    let method = "cuDNN benchmark on; fresh randn inputs; CUDA events around each call on the current stream (graphs: input copy + replay); each system timed in two blocks (the warm-ups, then half the timed runs), the systems' blocks in mirrored order A B .. B A; median of all timed runs";
    let (dtype, torchscript) = match args.models {
        Models::Zoo { dtype, .. } => (dtype, None),
        Models::TorchScript { path, inputs, dtype } => {
            (dtype, Some(serde_json::json!({ "file": path.display().to_string(), "inputs": inputs.iter().map(InputSpec::to_string).collect::<Vec<_>>() })))
        }
    };
    let precision = dtype.filter(|&k| k != Kind::Float).map_or(PRECISION.to_string(), |kind| {
        format!("{} (parameters, buffers and float inputs converted, every system alike)", experiments::torchscript::kind_name(kind))
    });
    let record = InferRecord {
        experiment: "inference",
        provenance: Provenance::now(gpu.info(), config.warmup, config.iterations, method),
        libtorch: LIBTORCH_VERSION,
        precision,
        torchscript,
        rows,
    };
    if let Some(path) = args.out {
        write_file(path, &serde_json::to_string_pretty(&record)?)?;
    }
    emit(&table(&record))
}

fn row_line(row: &InferRow) -> String {
    let prepared = row.prepare.as_ref().map_or(String::new(), |p| {
        format!(
            " | {} streams {} syncs, {} kernels{}{}{}{}, prepare {:.2} s, rel.err {:.1e}{}",
            p.streams,
            p.syncs,
            p.kernel_nodes,
            if p.channels_last { ", NHWC" } else { "" },
            if p.host_values_folded > 0 { format!(", {} host values folded", p.host_values_folded) } else { String::new() },
            // Frozen on a CPU copy (nimble-torch's PrepareOptions::freeze_on_host).
            if p.frozen_on_host { ", frozen on the host" } else { "" },
            p.layout_trial.map_or(String::new(), |t| format!(" (timed NCHW {:.0} us, NHWC {:.0} us)", t.nchw_us, t.nhwc_us)),
            p.seconds.total,
            row.relative_error.unwrap_or(f64::NAN),
            row.timed_relative_error.map_or(String::new(), |e| format!(" (exact float32; timed graph {e:.1e})"))
        )
    });
    format!(
        "{:<16} {:<6} {:<4} {:>8.3} ms (mean {:.3}, sd {:.3}){}",
        row.model,
        row.mode.name(),
        if matches!(row.mode, InferMode::Eager | InferMode::TorchScript) { "" } else if row.optimized { "opt" } else { "raw" },
        row.latency.median_us / 1000.0,
        row.latency.mean_us / 1000.0,
        row.latency.stdev_us / 1000.0,
        prepared
    )
}

/// The summary table: one line per model and rewrite setting.
fn table(record: &InferRecord) -> String {
    let p = &record.provenance;
    let mut lines = vec![
        provenance_line(p, record.libtorch, &format!("batch {}", record.rows.first().map_or(1, |r| r.batch))),
        format!(
            "{:<16} {:<4} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8} {:>9}",
            "model", "opt", "eager", "script", "graph", "nimble", "x graph", "floor", "x floor", "streams", "kernels", "prepare s"
        ),
    ];
    let mut keys: Vec<(String, bool)> = Vec::new();
    for row in &record.rows {
        if matches!(row.mode, InferMode::Graph | InferMode::Nimble) && !keys.contains(&(row.model.clone(), row.optimized)) {
            keys.push((row.model.clone(), row.optimized));
        }
    }
    let find = |model: &str, mode: InferMode, optimized: bool| {
        record.rows.iter().find(|r| r.model == model && r.mode == mode && (matches!(mode, InferMode::Eager | InferMode::TorchScript) || r.optimized == optimized))
    };
    let ms = |row: Option<&InferRow>| row.map_or("-".to_string(), |r| format!("{:.3}", r.latency.median_us / 1000.0));
    for (model, optimized) in keys {
        let eager = find(&model, InferMode::Eager, false);
        let script = find(&model, InferMode::TorchScript, false);
        let graph = find(&model, InferMode::Graph, optimized);
        let nimble = find(&model, InferMode::Nimble, optimized);
        let speedup = match (graph, nimble) {
            (Some(g), Some(n)) => format!("{:.2}", g.latency.median_us / n.latency.median_us),
            _ => "-".into(),
        };
        let prepared = nimble.or(graph).and_then(|r| r.prepare.as_ref());
        let floor = nimble.and_then(|r| r.floor.as_ref());
        lines.push(format!(
            "{:<16} {:<4} {:>8} {:>8} {:>8} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8} {:>9}",
            model,
            if optimized { "yes" } else { "no" },
            ms(eager),
            ms(script),
            ms(graph),
            ms(nimble),
            speedup,
            floor.map_or("-".into(), |f| format!("{:.3}", f.floor_us / 1000.0)),
            floor.map_or("-".into(), |f| format!("{:.2}", f.over_floor)),
            nimble.and_then(|r| r.prepare.as_ref()).map_or("-".into(), |p| p.streams.to_string()),
            prepared.map_or("-".into(), |p| p.kernel_nodes.to_string()),
            nimble.and_then(|r| r.prepare.as_ref()).map_or("-".into(), |p| format!("{:.2}", p.seconds.total)),
        ));
    }
    lines.join("\n")
}

// `infer`'s last pass: each Nimble row's floor (the critical path of its kernel-timed task graph,
// which no stream assignment can beat) and the latency over it.

/// Fills `floor` in every Nimble row of `rows`, model by model, and writes each kernel-timed
/// graph to `graphs` (`MODEL.graph.json`, `MODEL.raw.graph.json` without the rewrites) when
/// given. The profiler it loads stays in the process and slows later launches, so this runs
/// after every measurement.
pub(crate) fn add_floors(models: Models<'_>, config: &InferConfig, rows: &mut [InferRow], graphs: Option<&Path>) -> Result<()> {
    if let Some(dir) = graphs {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let count = rows.iter().filter(|r| r.mode == InferMode::Nimble).count();
    let bar = progress(count, "floor");
    for_each_model(models, Device::Cuda(0), |name| bar.set_message(name.to_string()), |model| {
        for row in rows.iter_mut().filter(|r| r.mode == InferMode::Nimble && r.model == model.name()) {
            let (floor, graph) = floor::measure_floor(model, config, row).with_context(|| format!("timing {}'s kernels for its floor", row.model))?;
            note(
                &bar,
                &format!(
                    "  {:<16} floor {:>8.1} us over {} of {} tasks (kernel time {:.1} us); Nimble {:.1} us = {:.2}x the floor",
                    row.model, floor.floor_us, floor.path_tasks, floor.tasks, floor.kernel_time_us, row.latency.median_us, floor.over_floor
                ),
            );
            if let Some(dir) = graphs {
                let file = format!("{}{}.graph.json", sanitize(&row.model), if row.optimized { "" } else { ".raw" });
                write_file(&dir.join(file), &graph.to_json_string())?;
            }
            row.floor = Some(floor);
            bar.inc(1);
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    Ok(())
}

/// A model name as a file name: TorchScript models are named by their path.
fn sanitize(name: &str) -> String {
    let stem = Path::new(name).file_stem().and_then(|s| s.to_str()).unwrap_or(name);
    stem.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn file_names_come_from_model_names_and_paths() {
        assert_eq!(sanitize("nasnet-a-mobile"), "nasnet-a-mobile");
        assert_eq!(sanitize("/models/bert base.pt"), "bert_base");
    }
}
