//! Commands over real models through nimble-torch: `export-graph` (any machine) and `infer`
//! (GPU).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use experiments::inference::{self, InferConfig, InferMode, InferRecord, InferRow, Subject, Variant, LIBTORCH_VERSION};
use experiments::models::{self, Dataset};
use experiments::record::Provenance;
use experiments::schedulers::{self, SchedulerRecord};
use experiments::torchscript::{InputSpec, TorchScriptModel};
use experiments::training::{self, TrainConfig, TrainMode, TrainRecord, TrainRow};
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

fn model_names(list: &str) -> Result<Vec<&'static str>> {
    let names: Vec<&str> = if list == "all" { models::MODELS.iter().map(|m| m.name).collect() } else { list.split(',').map(str::trim).collect() };
    names.into_iter().map(|name| models::info(name).map(|m| m.name).map_err(anyhow::Error::msg)).collect()
}

/// Builds a registered ImageNet model, with weights from `weights` when given.
fn build_model(name: &str, device: Device, weights: Option<&Path>) -> Result<models::Model> {
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
    fn check(&self) -> Result<()> {
        match *self {
            Models::Zoo { list, weights, .. } => {
                let names = model_names(list)?;
                anyhow::ensure!(weights.is_none() || names.len() == 1, "--weights loads one model's weights: name exactly one model");
            }
            Models::TorchScript { path, inputs, .. } => {
                anyhow::ensure!(path.is_file(), "--torchscript {}: no such file", path.display());
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

/// `export-graph`: trace a model and write its task graph as JSON.
pub fn export_graph(models: Models<'_>, batch: i64, device: TraceDevice, optimize: bool, out: Option<&PathBuf>) -> Result<()> {
    anyhow::ensure!(batch >= 1, "--batch must be at least 1, got {batch}");
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
fn check_config(config: &InferConfig) -> Result<()> {
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
        crate::floors::add_floors(args.models, config, &mut rows, args.floor_graphs)?;
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
            " | {} streams {} syncs, {} kernels{}{}, prepare {:.2} s, rel.err {:.1e}{}",
            p.streams,
            p.syncs,
            p.kernel_nodes,
            if p.channels_last { ", NHWC" } else { "" },
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

/// `train --backward-streams` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum BackwardArg {
    /// every backward op on one stream (the paper)
    One,
    /// each backward op on its forward op's stream
    Forward,
}

impl From<BackwardArg> for nimble_torch::BackwardStreams {
    fn from(arg: BackwardArg) -> Self {
        match arg {
            BackwardArg::One => nimble_torch::BackwardStreams::One,
            BackwardArg::Forward => nimble_torch::BackwardStreams::Forward,
        }
    }
}

/// What `train` measures.
pub struct TrainArgs<'a> {
    pub models: &'a str,
    pub batches: &'a [i64],
    pub modes: &'a [String],
    pub algorithm: &'a str,
    pub backward_streams: nimble_torch::BackwardStreams,
    pub warmup: usize,
    pub iterations: usize,
    pub check_steps: usize,
    pub out: Option<&'a Path>,
}

/// The training models `list` names (comma-separated, or `all`), each checked to be one.
pub(crate) fn training_models(list: &str) -> Result<Vec<&'static str>> {
    let names: Vec<&str> = if list == "all" { models::MODELS.iter().filter(|m| m.training).map(|m| m.name).collect() } else { model_names(list)? };
    for name in &names {
        let info = models::info(name).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(info.training, "`{name}` is not a training model; `nimble-bench models --dataset cifar10` lists them");
    }
    Ok(names)
}

/// `train`: one training step per mode, model and batch size, checked against eager training.
pub fn train(args: &TrainArgs<'_>) -> Result<()> {
    anyhow::ensure!(args.batches.iter().all(|&b| b >= 1), "--batch sizes must be at least 1");
    anyhow::ensure!(args.iterations >= 1, "--iters must be at least 1");
    nimble_sched::algorithms::by_name(args.algorithm)?;
    let modes: Vec<TrainMode> = args.modes.iter().map(|m| TrainMode::parse(m.trim())).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    let names = training_models(args.models)?;
    let gpu = open_gpu("train", "")?;
    let mut rows = Vec::new();
    let mut config = TrainConfig::paper(args.batches[0]);
    let bar = progress(args.batches.len() * names.len(), "train");
    for &batch in args.batches {
        for name in &names {
            bar.set_message(format!("{name} at batch {batch}"));
            config = TrainConfig {
                batch,
                warmup: args.warmup,
                iterations: args.iterations,
                algorithm: args.algorithm.to_string(),
                backward_streams: args.backward_streams,
                check_steps: args.check_steps,
                ..TrainConfig::paper(batch)
            };
            nimble_torch::cuda_synchronize()?;
            nimble_torch::cuda_empty_cache()?;
            let measured = training::measure_model(name, &config, &modes).map_err(anyhow::Error::msg).with_context(|| format!("measuring {name} at batch {batch}"))?;
            for row in measured {
                note(&bar, &format!("  {}", train_line(&row)));
                rows.push(row);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let method = "cuDNN benchmark on; fresh randn inputs and random labels every step; CUDA events around each step on the current stream; each mode timed in its own block on its own model copy; median";
    let record = TrainRecord {
        experiment: "training",
        provenance: Provenance::now(gpu.info(), args.warmup, args.iterations, method),
        libtorch: LIBTORCH_VERSION,
        precision: PRECISION,
        dataset: Dataset::Cifar10,
        optimizer: training::optimizer_label(&config),
        config,
        rows,
    };
    if let Some(path) = args.out {
        write_file(path, &serde_json::to_string_pretty(&record)?)?;
    }
    emit(&train_table(&record))
}

fn train_line(row: &TrainRow) -> String {
    let prepared = row.prepare.as_ref().map_or(String::new(), |p| {
        format!(" | {} streams, {}+{} kernels, prepare {:.2} s", p.streams, p.kernel_nodes, p.backward_kernel_nodes, p.seconds.total)
    });
    let check = row.check.as_ref().map_or(String::new(), |c| {
        format!(", {} step(s) vs eager: updates {:.1e} ({}), losses {:.1e}", c.steps, c.max_update_error, c.variable, c.max_loss_error)
    });
    format!(
        "{:<16} b{:<4} {:<6} {:>8.3} ms (mean {:.3}, sd {:.3}){}{}",
        row.model,
        row.batch,
        row.mode.name(),
        row.step.median_us / 1000.0,
        row.step.mean_us / 1000.0,
        row.step.stdev_us / 1000.0,
        prepared,
        check
    )
}

/// The summary table: one line per model and batch size, ms per step and speedups over eager.
fn train_table(record: &TrainRecord) -> String {
    let p = &record.provenance;
    let mut lines = vec![
        provenance_line(p, record.libtorch, "CIFAR-10 training step"),
        {
            let mut header = format!("{:<16} {:>5}", "model", "batch");
            for mode in TrainMode::ALL {
                header += &format!(" {:>12}", mode.name());
            }
            header + &format!(" {:>9} {:>9} {:>7}", "x nimble", "x step", "streams")
        },
        "(ms per step; x: speedup over eager)".to_string(),
    ];
    let mut keys: Vec<(String, i64)> = Vec::new();
    for row in &record.rows {
        if !keys.contains(&(row.model.clone(), row.batch)) {
            keys.push((row.model.clone(), row.batch));
        }
    }
    for (model, batch) in keys {
        let find = |mode| record.rows.iter().find(|r| r.model == model && r.batch == batch && r.mode == mode);
        let speedup = |mode| match (find(TrainMode::Eager), find(mode)) {
            (Some(e), Some(r)) => format!("{:.2}", e.step.median_us / r.step.median_us),
            _ => "-".into(),
        };
        let streams = find(TrainMode::Step).or(find(TrainMode::Nimble)).and_then(|r| r.prepare.as_ref()).map_or("-".into(), |p| p.streams.to_string());
        let mut line = format!("{:<16} {:>5}", model, batch);
        for mode in TrainMode::ALL {
            line += &format!(" {:>12}", find(mode).map_or("-".to_string(), |r| format!("{:.3}", r.step.median_us / 1000.0)));
        }
        line += &format!(" {:>9} {:>9} {:>7}", speedup(TrainMode::Nimble), speedup(TrainMode::Step), streams);
        lines.push(line);
    }
    lines.join("\n")
}

/// Measures every registered algorithm on `models` (the schedulers experiment) and writes the
/// record to `out`.
/// Measures a figure's experiment, writing its record to `args.results`.
pub fn measure_figure(what: &crate::figures::Measurement<'_>, args: &crate::figures::Rendering) -> Result<()> {
    use crate::figures::Measurement;
    match *what {
        Measurement::Inference { models, batch } => infer(&InferArgs {
            models: Models::Zoo { list: models, weights: None, dtype: None },
            modes: &[InferMode::Eager, InferMode::TorchScript, InferMode::Graph, InferMode::Nimble],
            optimize: Optimize::On,
            config: InferConfig::defaults(batch, args.warmup, args.iterations),
            out: Some(&args.results),
            floor: true,
            floor_graphs: None,
        }),
        Measurement::Training { models, batches } => {
            let modes: Vec<String> = ["eager", "graph", "nimble", "nimble-fused", "step"].iter().map(|m| m.to_string()).collect();
            train(&TrainArgs {
                models,
                batches,
                modes: &modes,
                algorithm: "nimble",
                backward_streams: nimble_torch::BackwardStreams::Forward,
                warmup: args.warmup,
                iterations: args.iterations,
                check_steps: 1,
                out: Some(&args.results),
            })
        }
        Measurement::Schedulers { models, kernel_graphs } => measure_schedulers(models, args.warmup, args.iterations, &args.results, kernel_graphs),
    }
}

fn measure_schedulers(models: &str, warmup: usize, iterations: usize, out: &Path, kernel_graphs: Option<&Path>) -> Result<()> {
    let names = model_names(models)?;
    let gpu = open_gpu("measuring the schedulers", "")?;
    let config = InferConfig::defaults(1, warmup, iterations);
    let algorithms = schedulers::algorithms();
    let mut measured = Vec::new();
    let bar = progress(names.len(), "schedulers");
    for name in names {
        bar.set_message(name);
        nimble_torch::cuda_synchronize()?;
        nimble_torch::cuda_empty_cache()?;
        tch::manual_seed(0);
        let model = build_model(name, Device::Cuda(0), None)?;
        let row = schedulers::measure_model(&model, &config, &algorithms).with_context(|| format!("measuring {name}"))?;
        let cells: Vec<String> = row.rows.iter().map(|r| format!("{} {:.3}", r.algorithm, r.latency.median_us / 1000.0)).collect();
        note(&bar, &format!("  {name}: eager {:.3} ms; {}", row.eager.median_us / 1000.0, cells.join(", ")));
        measured.push(row);
        bar.inc(1);
    }
    bar.finish_and_clear();
    let method = "batch 1, inference rewrites on; cuDNN benchmark on; fresh randn inputs; CUDA events around each call on the current stream (graphs: input copy + replay); each system timed in its own block; median; simulated with the simulator's H200 defaults (graph launch) on the task graph with each op's measured time";
    let record = SchedulerRecord {
        experiment: "schedulers",
        provenance: Provenance::now(gpu.info(), warmup, iterations, method),
        libtorch: LIBTORCH_VERSION,
        precision: PRECISION,
        batch: 1,
        simulator: nimble_sched::SimulatorConfig::graph(),
        models: measured,
    };
    write_file(out, &serde_json::to_string_pretty(&record)?)?;
    if let Some(dir) = kernel_graphs {
        write_kernel_graphs(dir, &record, &config)?;
    }
    Ok(())
}

/// Each measured model's kernel-timed task graph to `dir/<model>.graph.json`, and the run's
/// provenance to `dir/provenance.json`. After every measurement: the profiler it loads slows the
/// process's later launches.
fn write_kernel_graphs(dir: &Path, record: &SchedulerRecord, config: &InferConfig) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let method = format!(
        "each model prepared as in the schedulers record beside it (nimble, its layout), captured on one stream and replayed {} times under the Kineto profiler; duration_us = the median span of each op's own kernels; attrs kernels, kernel_busy_us, sm_share (kernels' grids against the GPU's resident-block capacity, weighted by time), event_us (the event-pair time)",
        nimble_torch::KERNEL_TIMING_REPLAYS
    );
    let provenance = serde_json::json!({ "experiment": "kernel-timed model graphs", "provenance": record.provenance, "method": method });
    write_file(&dir.join("provenance.json"), &serde_json::to_string_pretty(&provenance)?)?;
    let names: Vec<&str> = record.models.iter().map(|m| m.model.as_str()).collect();
    let models = Models::Zoo { list: &names.join(","), weights: None, dtype: None };
    for_each_model(models, Device::Cuda(0), |_| {}, |model| {
        let measured = record.models.iter().find(|m| m.model == model.name()).expect("built from the record's names");
        let graph = schedulers::kernel_timed_graph(model, config, measured).with_context(|| format!("timing {}'s kernels", measured.model))?;
        let path = dir.join(format!("{}.graph.json", measured.model));
        write_file(&path, &graph.to_json_string())?;
        let work: f64 = graph.nodes().iter().filter_map(|n| n.duration_us).sum();
        eprintln!("{}: {} tasks, kernel time {:.1} µs -> {}", measured.model, graph.len(), work, path.display());
        Ok(())
    })
}

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
