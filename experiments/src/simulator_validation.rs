//! Validating `nimble-sched`'s simulator against the GPU: a suite of synthetic DAGs, run by
//! `nimble-cuda`'s synthetic executor under every registered algorithm in eager and graph mode,
//! recorded with provenance, and evaluated offline by re-simulating each run.
//!
//! Evaluation needs no GPU: the graphs are regenerated from their specifications (generation is
//! deterministic) and the plans recomputed, so a committed record keeps checking the simulator
//! as its model or defaults change.

use nimble_cuda::{Gpu, Samples, SpinKernel, SyntheticExecutor};
use nimble_graph::{SyntheticSpec, TaskGraph};
use nimble_sched::algorithms::{self, ALGORITHMS};
use nimble_sched::{simulate, Analysis, LaunchMode, SimulatorConfig};
use serde::{Deserialize, Serialize};

use crate::record::Provenance;

/// One graph of the suite.
#[derive(Clone, Copy, Debug)]
pub struct SuiteGraph {
    /// A `SyntheticSpec` string.
    pub spec: &'static str,
    /// Run every kernel at zero requested duration (the spin kernel's minimum), to expose launch
    /// and dependency overheads.
    pub zero_durations: bool,
}

const fn timed(spec: &'static str) -> SuiteGraph {
    SuiteGraph { spec, zero_durations: false }
}

const fn overhead(spec: &'static str) -> SuiteGraph {
    SuiteGraph { spec, zero_durations: true }
}

/// Chains, fans of 2–128 branches, NASNet-like cells, random layered DAGs of 1k–10k nodes and a
/// DNN-like graph, with their durations; and zero-duration chains and fans for the overheads.
pub const SUITE: &[SuiteGraph] = &[
    timed("chain:200"),
    timed("fan:2:8"),
    timed("fan:8:8"),
    timed("fan:32:4"),
    timed("fan:128:2"),
    timed("nasnet:4"),
    timed("nasnet:12"),
    timed("layered:1000"),
    timed("layered:5000"),
    timed("layered:10000"),
    timed("dnn:2000"),
    overhead("chain:500"),
    overhead("fan:16:1"),
    overhead("fan:128:1"),
    overhead("fan:128:8"),
];

/// A shorter suite for smoke runs.
pub const QUICK_SUITE: &[SuiteGraph] = &[timed("chain:200"), timed("fan:8:8"), timed("nasnet:4"), overhead("fan:16:1")];

/// One measured (graph, algorithm, mode).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ValidationRun {
    pub graph: String,
    pub zero_durations: bool,
    pub nodes: usize,
    pub algorithm: String,
    pub mode: LaunchMode,
    pub streams: usize,
    pub syncs: usize,
    pub measured: Samples,
    /// The simulator's prediction with the defaults of the code that measured.
    pub simulated_us: f64,
}

/// A whole validation run, as committed under `paper-figs/results/`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ValidationRecord {
    pub experiment: String,
    pub provenance: Provenance,
    pub cycles_per_us: f64,
    pub blocks_per_kernel: u32,
    pub runs: Vec<ValidationRun>,
}

/// The graph of a suite entry (durations zeroed if asked).
pub fn suite_graph(spec: &str, zero_durations: bool) -> Result<TaskGraph, nimble_graph::GraphError> {
    let graph = spec.parse::<SyntheticSpec>()?.generate();
    Ok(if zero_durations { graph.with_durations(|_, _| Some(0.0)) } else { graph })
}

/// Every registered algorithm (round-robin with 4 streams).
pub fn algorithm_names() -> Vec<String> {
    ALGORITHMS.iter().map(|a| if a.usage.contains(':') { format!("{}:4", a.name) } else { a.name.to_string() }).collect()
}

/// Options of a validation run.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    pub warmup: usize,
    pub iterations: usize,
    pub blocks: u32,
}

/// Measures every suite graph under every algorithm and mode on `gpu`, calling `progress` with
/// each finished run.
pub fn run_suite(
    gpu: &Gpu,
    suite: &[SuiteGraph],
    options: RunOptions,
    mut progress: impl FnMut(&ValidationRun),
) -> Result<ValidationRecord, Box<dyn std::error::Error>> {
    let kernel = SpinKernel::new(gpu, options.blocks)?;
    let mut runs = Vec::new();
    for entry in suite {
        let graph = suite_graph(entry.spec, entry.zero_durations)?;
        let analysis = Analysis::new(&graph);
        for name in algorithm_names() {
            let plan = algorithms::by_name(&name)?.assign(&analysis);
            let executor = SyntheticExecutor::new(gpu, &kernel, &graph, &plan, 0.0)?;
            for mode in [LaunchMode::Eager, LaunchMode::Graph] {
                let measured = executor.measure(mode, options.warmup, options.iterations)?;
                let config = match mode {
                    LaunchMode::Eager => SimulatorConfig::eager(),
                    LaunchMode::Graph => SimulatorConfig::graph(),
                };
                let run = ValidationRun {
                    graph: entry.spec.to_string(),
                    zero_durations: entry.zero_durations,
                    nodes: graph.len(),
                    algorithm: plan.algorithm.clone(),
                    mode,
                    streams: plan.streams,
                    syncs: plan.syncs.len(),
                    simulated_us: simulate(&graph, &plan, &config).makespan_us,
                    measured,
                };
                progress(&run);
                runs.push(run);
            }
        }
    }
    let method = format!(
        "nimble-cuda synthetic executor: one clock64 spin kernel per node ({} block(s) of 32 threads), CUDA events around each run, synchronized between runs",
        options.blocks
    );
    Ok(ValidationRecord {
        experiment: "simulator-validation".into(),
        provenance: Provenance::now(gpu.info(), options.warmup, options.iterations, &method),
        cycles_per_us: kernel.cycles_per_us,
        blocks_per_kernel: options.blocks,
        runs,
    })
}

/// One run re-simulated with the current model.
#[derive(Clone, Debug, Serialize)]
pub struct Evaluated {
    pub graph: String,
    pub zero_durations: bool,
    pub algorithm: String,
    pub mode: LaunchMode,
    pub measured_us: f64,
    pub simulated_us: f64,
    /// (simulated − measured) / measured.
    pub relative_error: f64,
}

/// Median absolute relative error per mode.
#[derive(Clone, Debug, Serialize)]
pub struct Evaluation {
    pub runs: Vec<Evaluated>,
    pub median_abs_error_graph: f64,
    pub median_abs_error_eager: f64,
}

/// Re-simulates every run of `record` with `graph_config` / `eager_config`.
pub fn evaluate(
    record: &ValidationRecord,
    graph_config: &SimulatorConfig,
    eager_config: &SimulatorConfig,
) -> Result<Evaluation, Box<dyn std::error::Error>> {
    let mut runs = Vec::with_capacity(record.runs.len());
    let mut cache: Option<(String, bool, TaskGraph)> = None;
    for run in &record.runs {
        if cache.as_ref().is_none_or(|(spec, zero, _)| *spec != run.graph || *zero != run.zero_durations) {
            cache = Some((run.graph.clone(), run.zero_durations, suite_graph(&run.graph, run.zero_durations)?));
        }
        let graph = &cache.as_ref().expect("just filled").2;
        let plan = algorithms::by_name(&run.algorithm)?.assign(&Analysis::new(graph));
        let config = match run.mode {
            LaunchMode::Graph => graph_config,
            LaunchMode::Eager => eager_config,
        };
        let simulated_us = simulate(graph, &plan, config).makespan_us;
        let measured_us = run.measured.median_us;
        runs.push(Evaluated {
            graph: run.graph.clone(),
            zero_durations: run.zero_durations,
            algorithm: run.algorithm.clone(),
            mode: run.mode,
            measured_us,
            simulated_us,
            relative_error: (simulated_us - measured_us) / measured_us,
        });
    }
    let median_of = |mode: LaunchMode| {
        let errors: Vec<f64> = runs.iter().filter(|r| r.mode == mode).map(|r| r.relative_error.abs()).collect();
        Samples::new(errors).median_us
    };
    Ok(Evaluation {
        median_abs_error_graph: median_of(LaunchMode::Graph),
        median_abs_error_eager: median_of(LaunchMode::Eager),
        runs,
    })
}
