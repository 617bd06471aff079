//! Every registered stream-assignment algorithm on every zoo model, measured and simulated; with
//! the eager baseline and the GPU work of each forward, the data of three figures: the scheduler
//! comparison, the multi-stream study and the overhead figure (the paper's Figure 2a).
//!
//! Per model, at batch 1: tch eager is timed; the forward without the inference rewrites is
//! prepared on one stream and timed too: eager's own kernels back to back, which is about how
//! long the GPU is busy in an eager forward; then, with the rewrites, the forward is prepared
//! with each algorithm, checked against eager, timed the paper's way, and its plan simulated
//! (graph launch, the simulator's calibrated H200 defaults) on the task graph with the measured
//! op times.
//!
//! "GPU work" sums each op's time measured alone with a pair of events in a gated pass; the
//! events add a microsecond or two per op, so it overstates small kernels' time. The overhead
//! figure uses the one-stream graph latencies instead.

use nimble_cuda::Samples;
use nimble_sched::algorithms::ALGORITHMS;
use nimble_sched::{simulate, SimulatorConfig};
use serde::Serialize;

use crate::inference::{prepare_checked, time_runs, InferConfig, InferMode, Subject};
use crate::models::Model;
use crate::record::Provenance;

/// One algorithm on one model.
#[derive(Clone, Debug, Serialize)]
pub struct SchedulerRow {
    pub algorithm: String,
    pub streams: usize,
    pub syncs: usize,
    pub kernel_nodes: usize,
    /// Measured latency per forward (input copy and replay), µs.
    pub latency: Samples,
    /// The simulator's makespan for the plan, µs.
    pub simulated_us: f64,
    /// Sum of the forward's op times, each measured alone (µs): the GPU work.
    pub gpu_work_us: f64,
    /// Relative error against eager tch on a fresh input.
    pub relative_error: f64,
    pub prepare_seconds: f64,
}

/// One model: its eager baseline and every algorithm.
#[derive(Clone, Debug, Serialize)]
pub struct SchedulerModel {
    pub model: String,
    /// The task graph's maximum logical concurrency (after the rewrites).
    pub width: usize,
    pub tasks: usize,
    pub eager: Samples,
    /// The GPU work of eager's ops (no rewrites), µs.
    pub eager_gpu_work_us: f64,
    /// Eager's ops (no rewrites) replayed as a one-stream CUDA graph: the GPU's busy time in an
    /// eager forward, give or take the graph's launch gaps.
    pub eager_kernels_graph: Samples,
    /// The layout every algorithm ran in: the first algorithm's prepare decides it (see
    /// `PrepareOptions::channels_last`), the others are prepared in the same one, so all run
    /// the same kernels.
    #[serde(default)]
    pub channels_last: bool,
    pub rows: Vec<SchedulerRow>,
}

/// The record under `paper-figs/results/schedulers.json`.
#[derive(Clone, Debug, Serialize)]
pub struct SchedulerRecord {
    pub experiment: &'static str,
    pub provenance: Provenance,
    pub libtorch: &'static str,
    pub precision: &'static str,
    pub batch: i64,
    pub simulator: SimulatorConfig,
    pub models: Vec<SchedulerModel>,
}

/// The registered algorithms with their default arguments.
pub fn algorithms() -> Vec<String> {
    ALGORITHMS.iter().map(|a| a.name.to_string()).collect()
}

fn work(graph: &nimble_graph::TaskGraph) -> f64 {
    (0..graph.len()).map(|i| graph.node(i).duration_us.unwrap_or(0.0)).sum()
}

/// Measures `model` with every algorithm in `algorithms` (see the module documentation).
pub fn measure_model(model: &Model, config: &InferConfig, algorithms: &[String]) -> nimble_torch::Result<SchedulerModel> {
    let eager = time_runs(model, config, |xs| {
        tch::no_grad(|| drop(model.forward(&xs[0])));
        Ok(())
    })?;
    let (eager_gpu_work_us, eager_kernels_graph) = {
        let (nimble, _, _) = prepare_checked(model, config, InferMode::Graph, false)?;
        let times = time_runs(model, config, |xs| nimble.forward(xs).map(drop))?;
        (work(nimble.task_graph().expect("prepared")), Samples::new(times))
    };
    // Decided per graph below, as every command decides it (`SimulatorConfig::for_graph`).
    let mut rows = Vec::new();
    let (mut width, mut tasks) = (0, 0);
    let mut layout = config.channels_last;
    for algorithm in algorithms {
        let config = InferConfig { algorithm: algorithm.clone(), channels_last: layout, ..config.clone() };
        let (nimble, report, check) = prepare_checked(model, &config, InferMode::Nimble, true)?;
        layout = Some(report.channels_last);
        let graph = nimble.task_graph().expect("prepared");
        let plan = nimble.plan().expect("prepared");
        width = graph.width(&graph.reachability());
        tasks = graph.len();
        let simulated_us = simulate(graph, plan, &SimulatorConfig::for_graph(nimble_sched::LaunchMode::Graph, graph)).makespan_us;
        let latency = time_runs(model, &config, |xs| nimble.forward(xs).map(drop))?;
        rows.push(SchedulerRow {
            algorithm: algorithm.clone(),
            streams: report.streams,
            syncs: report.syncs,
            kernel_nodes: report.kernel_nodes,
            latency: Samples::new(latency),
            simulated_us,
            gpu_work_us: work(graph),
            relative_error: check.relative_error,
            prepare_seconds: report.seconds.total,
        });
    }
    Ok(SchedulerModel {
        model: model.info.name.to_string(),
        width,
        tasks,
        eager: Samples::new(eager),
        eager_gpu_work_us,
        eager_kernels_graph,
        channels_last: layout.unwrap_or(false),
        rows,
    })
}

/// `model`'s task graph as `measure_model` prepared it (`nimble`, in `measured.channels_last`),
/// with each op's time from its own kernels (`Nimble::kernel_timed_graph`): what the simulator
/// is validated on. Loads the profiler, which slows later launches in the process: call it
/// after every measurement.
pub fn kernel_timed_graph(model: &dyn Subject, config: &InferConfig, measured: &SchedulerModel) -> nimble_torch::Result<nimble_graph::TaskGraph> {
    let config = InferConfig { algorithm: "nimble".into(), ..config.clone() };
    crate::floor::kernel_timed_graph(model, &config, measured.channels_last, true)
}
