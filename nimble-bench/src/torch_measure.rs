//! Measuring a figure's experiment on the GPU (`figure … --measure`): inference, training and
//! the schedulers experiment with its kernel graphs.

use std::path::Path;

use anyhow::{Context, Result};
use experiments::inference::{InferConfig, InferMode, LIBTORCH_VERSION};
use experiments::record::Provenance;
use experiments::schedulers::{self, SchedulerRecord};
use tch::Device;

use crate::command_args::{Measurement, Rendering};
use crate::output::{note, progress, write_file};
use crate::torch::{build_model, for_each_model, infer, model_names, open_gpu, InferArgs, Models, Optimize, PRECISION};
use crate::torch_train::{train, TrainArgs};

/// Measures a figure's experiment, writing its record to `args.results`.
pub fn measure_figure(what: &Measurement<'_>, args: &Rendering) -> Result<()> {
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

/// Measures every registered algorithm on `models` (the schedulers experiment) and writes the
/// record to `out`.
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
        "each model prepared as in the schedulers record beside it (nimble, its layout), captured on one stream and replayed {} times under the Kineto profiler; duration_us = the median time during which one of each op's own kernels ran (from the previous op's end); attrs kernel_span_us (first start to last end), kernels, sm_share (kernels' grids against the GPU's resident-block capacity, weighted by time), event_us (the event-pair time)",
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
