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
use nimble_sched::{simulate, Analysis, LaunchMode, SimulatorConfig, StreamPlan};
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

/// Held-out graphs (other seeds and sizes) for checking a calibration on runs it was not
/// fitted to.
pub const HOLDOUT_SUITE: &[SuiteGraph] = &[
    timed("chain:100"),
    timed("fan:4:16"),
    timed("fan:64:3"),
    timed("nasnet:8:1"),
    timed("layered:2000:1"),
    timed("layered:8000:2"),
    timed("dnn:5000:3"),
    overhead("chain:300"),
    overhead("fan:64:4"),
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

/// Every registered algorithm, with its default argument (round-robin gets 4 streams).
pub fn algorithm_names() -> Vec<String> {
    ALGORITHMS.iter().map(|a| a.name.to_string()).collect()
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
                let run = ValidationRun {
                    graph: entry.spec.to_string(),
                    zero_durations: entry.zero_durations,
                    nodes: graph.len(),
                    algorithm: plan.algorithm.clone(),
                    mode,
                    streams: plan.streams,
                    syncs: plan.syncs.len(),
                    simulated_us: simulate(&graph, &plan, &SimulatorConfig::for_mode(mode)).makespan_us,
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

/// A record's runs with their graphs and plans rebuilt, ready to be re-simulated many times.
pub struct PreparedRuns {
    graphs: Vec<TaskGraph>,
    cases: Vec<(usize, StreamPlan, usize)>, // (graph, plan, run index in the record)
    record: ValidationRecord,
}

impl PreparedRuns {
    /// Regenerates every graph of `record` and recomputes every plan.
    ///
    /// # Errors
    /// A record without runs, or with a run whose measured time is not a positive number (the
    /// errors would be NaN or meaningless), or whose graph or algorithm is unknown.
    pub fn new(record: &ValidationRecord) -> Result<PreparedRuns, Box<dyn std::error::Error>> {
        if record.runs.is_empty() {
            return Err("the record has no runs; expected a validate-simulator record with at least one measured run".into());
        }
        if let Some(run) = record.runs.iter().find(|r| !(r.measured.median_us.is_finite() && r.measured.median_us > 0.0)) {
            return Err(format!(
                "run {} with {} in {} mode has a measured median of {} µs; expected a positive time",
                run.graph,
                run.algorithm,
                run.mode.name(),
                run.measured.median_us
            )
            .into());
        }
        for mode in [LaunchMode::Graph, LaunchMode::Eager] {
            if !record.runs.iter().any(|r| r.mode == mode) {
                return Err(format!("the record has no {}-mode runs; expected runs in both modes, as validate-simulator measures them", mode.name()).into());
            }
        }
        let mut graphs: Vec<TaskGraph> = Vec::new();
        let mut keys: Vec<(String, bool)> = Vec::new();
        let mut plans: Vec<((usize, String), StreamPlan)> = Vec::new();
        let mut cases = Vec::with_capacity(record.runs.len());
        for (index, run) in record.runs.iter().enumerate() {
            let key = (run.graph.clone(), run.zero_durations);
            let graph = match keys.iter().position(|k| *k == key) {
                Some(g) => g,
                None => {
                    graphs.push(suite_graph(&run.graph, run.zero_durations)?);
                    keys.push(key);
                    graphs.len() - 1
                }
            };
            let plan_key = (graph, run.algorithm.clone());
            let plan = match plans.iter().find(|(k, _)| *k == plan_key) {
                Some((_, plan)) => plan.clone(),
                None => {
                    let plan = algorithms::by_name(&run.algorithm)?.assign(&Analysis::new(&graphs[graph]));
                    plans.push((plan_key, plan.clone()));
                    plan
                }
            };
            cases.push((graph, plan, index));
        }
        Ok(PreparedRuns { graphs, cases, record: record.clone() })
    }

    /// Re-simulates every run with `graph_config` / `eager_config`.
    pub fn evaluate(&self, graph_config: &SimulatorConfig, eager_config: &SimulatorConfig) -> Evaluation {
        let runs: Vec<Evaluated> = self
            .cases
            .iter()
            .map(|(graph, plan, index)| {
                let run = &self.record.runs[*index];
                let config = if run.mode == LaunchMode::Graph { graph_config } else { eager_config };
                let simulated_us = simulate(&self.graphs[*graph], plan, config).makespan_us;
                let measured_us = run.measured.median_us;
                Evaluated {
                    graph: run.graph.clone(),
                    zero_durations: run.zero_durations,
                    algorithm: run.algorithm.clone(),
                    mode: run.mode,
                    measured_us,
                    simulated_us,
                    relative_error: (simulated_us - measured_us) / measured_us,
                }
            })
            .collect();
        let median_of = |mode: LaunchMode| {
            Samples::new(runs.iter().filter(|r| r.mode == mode).map(|r| r.relative_error.abs()).collect()).median_us
        };
        Evaluation { median_abs_error_graph: median_of(LaunchMode::Graph), median_abs_error_eager: median_of(LaunchMode::Eager), runs }
    }

    /// Mean |ln(simulated / measured)| over the runs of `config.mode`: the fit's objective,
    /// which weighs a 2× error the same whether the run took 10 µs or 100 ms.
    fn loss(&self, config: &SimulatorConfig) -> f64 {
        let (sum, count) = self
            .cases
            .iter()
            .filter(|(_, _, index)| self.record.runs[*index].mode == config.mode)
            .map(|(graph, plan, index)| {
                let simulated = simulate(&self.graphs[*graph], plan, config).makespan_us.max(1e-3);
                (simulated / self.record.runs[*index].measured.median_us).ln().abs()
            })
            .fold((0.0, 0usize), |(s, c), e| (s + e, c + 1));
        sum / count.max(1) as f64
    }

    /// Fits the parameters of `start.mode` by coordinate descent: each round tries scaling each
    /// parameter up and down and keeps the best change, until a round improves nothing.
    pub fn fit(&self, start: &SimulatorConfig) -> SimulatorConfig {
        type Field = fn(&mut SimulatorConfig) -> &mut f64;
        let fields: Vec<Field> = match start.mode {
            LaunchMode::Graph => vec![|c| &mut c.graph_launch_us, |c| &mut c.graph_branch_us, |c| &mut c.graph_dependency_latency_us, |c| &mut c.dispatch_us],
            LaunchMode::Eager => vec![|c| &mut c.eager_launch_us, |c| &mut c.eager_event_us, |c| &mut c.eager_dependency_latency_us, |c| &mut c.eager_sync_latency_us],
        };
        let mut best = start.clone();
        let mut best_loss = self.loss(&best);
        for _round in 0..30 {
            let mut improved = false;
            for field in &fields {
                let current = *field(&mut best.clone());
                let candidates: Vec<f64> = if current == 0.0 {
                    vec![0.01, 0.05, 0.2, 1.0]
                } else {
                    [0.0, 0.5, 0.8, 0.9, 0.95, 0.98, 1.02, 1.05, 1.1, 1.25, 2.0].iter().map(|f| current * f).collect()
                };
                for value in candidates {
                    let mut trial = best.clone();
                    *field(&mut trial) = value;
                    let loss = self.loss(&trial);
                    if loss < best_loss - 1e-9 {
                        (best, best_loss, improved) = (trial, loss, true);
                    }
                }
            }
            if !improved {
                break;
            }
        }
        best
    }
}

/// Re-simulates every run of `record` with `graph_config` / `eager_config`.
pub fn evaluate(
    record: &ValidationRecord,
    graph_config: &SimulatorConfig,
    eager_config: &SimulatorConfig,
) -> Result<Evaluation, Box<dyn std::error::Error>> {
    Ok(PreparedRuns::new(record)?.evaluate(graph_config, eager_config))
}
