//! The scheduling-layer commands: `algos`, `gen`, `assign`, `simulate`, `dot`, `compare`.
//! They need no GPU and no libtorch.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use nimble_graph::{DotOptions, SyntheticSpec, TaskGraph};
use nimble_sched::algorithms::{self, ALGORITHMS};
use nimble_sched::{simulate, verified, Analysis, LaunchMode, SimulatorConfig, StreamPlan};
use serde::Serialize;
use serde_json::json;

use crate::output::{emit, emit_json, write_file};

/// Where the task graph comes from: a JSON file or a synthetic specification.
#[derive(Args, Debug)]
#[group(required = true, multiple = false)]
pub struct GraphSource {
    /// Task graph in the JSON schema of nimble-graph
    #[arg(long, value_name = "FILE")]
    graph: Option<PathBuf>,
    /// Synthetic graph: chain:N, fan:B[:D], nasnet:C[:SEED], layered:N[:SEED], dnn:N[:SEED]
    #[arg(long, value_name = "SPEC")]
    synthetic: Option<String>,
}

impl GraphSource {
    /// A source from a file or a synthetic spec (the file wins when both are given).
    pub fn new(graph: Option<PathBuf>, synthetic: Option<String>) -> GraphSource {
        GraphSource { graph, synthetic }
    }

    pub fn load(&self) -> Result<TaskGraph> {
        let graph = match (&self.graph, &self.synthetic) {
            (Some(path), _) => {
                let context = || format!("reading {}", path.display());
                let text = nimble_graph::json::read_text(path)?;
                let graph = TaskGraph::from_json_str(&text).with_context(context)?;
                anyhow::ensure!(!graph.is_empty(), "{}: the task graph has no nodes; expected at least one task to schedule", path.display());
                graph
            }
            (None, Some(spec)) => spec.parse::<SyntheticSpec>()?.generate(),
            (None, None) => unreachable!("clap requires one source"),
        };
        Ok(graph)
    }
}

/// A graph and the algorithm to plan it with.
#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub source: GraphSource,
    /// Algorithm name from `algos` (e.g. nimble, round-robin:4)
    #[arg(long, default_value = "nimble")]
    pub algo: String,
}

/// Simulator parameters; defaults are the calibrated H200 values documented in nimble-sched.
#[derive(Args, Debug)]
pub struct SimulatorArgs {
    /// JSON object overriding any of the model's parameters (the output of
    /// `calibrate-simulator`, or a hand-written what-if)
    #[arg(long, value_name = "FILE")]
    sim_config: Option<PathBuf>,
    /// Host cost of one eager kernel launch, µs (about 12 to model PyTorch eager)
    #[arg(long, allow_hyphen_values = true, value_name = "US")]
    launch_us: Option<f64>,
    /// Most kernels running at once
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    max_concurrent: Option<usize>,
    /// Duration of nodes that have no duration_us, µs
    #[arg(long, allow_hyphen_values = true, value_name = "US")]
    default_duration_us: Option<f64>,
    /// SM share of nodes without an sm_share attribute, in [0, 1] (0: no limit)
    #[arg(long, allow_hyphen_values = true, value_name = "SHARE")]
    sm_share: Option<f64>,
}

impl SimulatorArgs {
    /// The options applied to the defaults for `mode` on `graph` (`SimulatorConfig::for_graph`):
    /// the one way every command decides the simulator's parameters for a graph.
    pub fn config_for(&self, mode: Mode, graph: &TaskGraph) -> Result<SimulatorConfig> {
        self.config_on(SimulatorConfig::for_graph(mode.into(), graph))
    }

    fn config_on(&self, base: SimulatorConfig) -> Result<SimulatorConfig> {
        let mut config = base;
        if let Some(path) = &self.sim_config {
            config = overridden(&config, path)?;
        }
        let non_negative = |name: &str, value: Option<f64>| -> Result<Option<f64>> {
            match value {
                Some(v) if !(v >= 0.0 && v.is_finite()) => anyhow::bail!("--{name} must be a non-negative number, got {v}"),
                other => Ok(other),
            }
        };
        if let Some(v) = non_negative("launch-us", self.launch_us)? {
            config.eager_launch_us = v;
        }
        if let Some(v) = non_negative("default-duration-us", self.default_duration_us)? {
            config.default_duration_us = v;
        }
        if let Some(v) = non_negative("sm-share", self.sm_share)? {
            anyhow::ensure!(v <= 1.0, "--sm-share must be in [0, 1], got {v}");
            config.default_sm_share = v;
        }
        if let Some(n) = self.max_concurrent {
            anyhow::ensure!(n >= 1, "--max-concurrent must be at least 1");
            config.max_concurrent_kernels = n;
        }
        config.validate()?;
        Ok(config)
    }
}

/// `config` with the fields present in the JSON object at `path` replaced (`mode` is kept).
fn overridden(config: &SimulatorConfig, path: &std::path::Path) -> Result<SimulatorConfig> {
    let context = || format!("reading simulator parameters from {}", path.display());
    let text = nimble_graph::json::read_text(path)?;
    let overrides: serde_json::Value = serde_json::from_str(&text).with_context(context)?;
    let serde_json::Value::Object(overrides) = overrides else {
        anyhow::bail!("{}: expected a JSON object of simulator parameters", path.display());
    };
    let mut merged = serde_json::to_value(config)?;
    let fields = merged.as_object_mut().expect("a config is an object");
    for (key, value) in overrides {
        if key == "mode" {
            continue;
        }
        anyhow::ensure!(fields.contains_key(&key), "{}: unknown simulator parameter `{key}`; known: {}", path.display(), fields.keys().cloned().collect::<Vec<_>>().join(", "));
        fields.insert(key, value);
    }
    serde_json::from_value(merged).with_context(context)
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Mode {
    /// one CUDA-graph launch of the whole plan
    Graph,
    /// kernel-by-kernel launches from the host
    Eager,
}

impl From<Mode> for LaunchMode {
    fn from(mode: Mode) -> LaunchMode {
        match mode {
            Mode::Graph => LaunchMode::Graph,
            Mode::Eager => LaunchMode::Eager,
        }
    }
}

/// `algos`: one line per registered algorithm.
pub fn algos() -> Result<()> {
    let width = ALGORITHMS.iter().map(|a| a.usage.len()).max().unwrap_or(0);
    for info in ALGORITHMS {
        emit(&format!("{:width$}  {}", info.usage, info.summary))?;
    }
    Ok(())
}

/// `gen`: write a synthetic graph as JSON.
pub fn generate(spec: &str, out: Option<&PathBuf>) -> Result<()> {
    let graph = spec.parse::<SyntheticSpec>()?.generate();
    match out {
        Some(path) => write_file(path, &graph.to_json_string()),
        None => emit(&graph.to_json_string()),
    }
}

/// A plan with the time it took to compute, analysis included.
struct TimedPlan {
    plan: StreamPlan,
    assign_ms: f64,
}

fn assign_timed<'g>(graph: &'g TaskGraph, algorithm: &str) -> Result<(Analysis<'g>, TimedPlan)> {
    let assigner = algorithms::by_name(algorithm)?;
    let started = Instant::now();
    let analysis = Analysis::new(graph);
    let plan = assigner.assign(&analysis);
    let assign_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok((analysis, TimedPlan { plan, assign_ms }))
}

/// `assign`: the plan, as a summary or as JSON.
pub fn assign(source: &GraphSource, algorithm: &str, as_json: bool) -> Result<()> {
    let graph = source.load()?;
    let (analysis, timed) = assign_timed(&graph, algorithm)?;
    let plan = &timed.plan;
    let report = verified(&analysis, plan)?;
    if as_json {
        let mut value = plan.to_json(&analysis);
        let extra = json!({
            "nodes": graph.len(),
            "edges": graph.edge_count(),
            "meg_edges": analysis.meg_edge_count(),
            "width": report.width,
            "max_logical_concurrency": report.max_logical_concurrency,
            "assign_ms": timed.assign_ms,
        });
        value.as_object_mut().expect("a plan is a JSON object").extend(extra.as_object().expect("object").clone());
        return emit_json(&value);
    }
    emit(&format!(
        "{}: {} nodes, {} edges ({} in the MEG), width {}\n{} streams, {} syncs, max logical concurrency: {}, assigned in {:.3} ms",
        plan.algorithm,
        graph.len(),
        graph.edge_count(),
        analysis.meg_edge_count(),
        report.width,
        plan.streams,
        plan.syncs.len(),
        yes_no(report.max_logical_concurrency),
        timed.assign_ms
    ))?;
    for (stream, nodes) in plan.stream_sequences().iter().enumerate() {
        let ids: Vec<String> = nodes.iter().map(|&v| graph.id_of(v).to_string()).collect();
        emit(&format!("stream {stream}: {}", ids.join(" ")))?;
    }
    let syncs: Vec<String> = plan.syncs.iter().map(|&(u, v)| format!("{}->{}", graph.id_of(u), graph.id_of(v))).collect();
    emit(&format!("syncs: {}", if syncs.is_empty() { "none".to_string() } else { syncs.join(" ") }))
}

/// `simulate`: makespan of the plan and of `single`, optionally a Chrome trace.
pub fn simulate_command(
    source: &GraphSource,
    algorithm: &str,
    mode: Mode,
    simulator: &SimulatorArgs,
    as_json: bool,
    trace: Option<&PathBuf>,
) -> Result<()> {
    let graph = source.load()?;
    let config = simulator.config_for(mode, &graph)?;
    let (analysis, timed) = assign_timed(&graph, algorithm)?;
    let single = algorithms::by_name("single")?.assign(&analysis);
    let result = simulate(&graph, &timed.plan, &config);
    let baseline = simulate(&graph, &single, &config);
    if let Some(path) = trace {
        write_file(path, &serde_json::to_string(&result.to_chrome_trace(&graph, &timed.plan))?)?;
    }
    let speedup = baseline.makespan_us / result.makespan_us;
    if as_json {
        return emit_json(&json!({
            "algorithm": timed.plan.algorithm,
            "mode": config.mode,
            "nodes": graph.len(),
            "streams": timed.plan.streams,
            "syncs": timed.plan.syncs.len(),
            "makespan_us": result.makespan_us,
            "host_end_us": result.host_end_us,
            "busy_us": result.busy_us,
            "single_makespan_us": baseline.makespan_us,
            "speedup_over_single": speedup,
            "critical_path_us": graph.critical_path().length_us,
            "calibration": config.calibration(),
            "config": config,
        }));
    }
    emit(&format!(
        "{} ({} mode, {} calibration): makespan {:.1} µs on {} streams with {} syncs; single stream {:.1} µs ({:.2}x); critical path {:.1} µs",
        timed.plan.algorithm,
        config.mode.name(),
        config.calibration(),
        result.makespan_us,
        timed.plan.streams,
        timed.plan.syncs.len(),
        baseline.makespan_us,
        speedup,
        graph.critical_path().length_us
    ))
}

/// `dot`: Graphviz of the plan.
pub fn dot(source: &GraphSource, algorithm: &str, out: Option<&PathBuf>) -> Result<()> {
    let graph = source.load()?;
    let (_, timed) = assign_timed(&graph, algorithm)?;
    let title = format!("{}: {} streams, {} syncs", timed.plan.algorithm, timed.plan.streams, timed.plan.syncs.len());
    let text = graph.to_dot(DotOptions { stream_of: Some(&timed.plan.stream_of), sync_edges: &timed.plan.syncs, title: Some(&title) });
    match out {
        Some(path) => write_file(path, &text),
        None => emit(text.trim_end()),
    }
}

/// `compare`: every registered algorithm (or a chosen few) on one graph.
pub fn compare(source: &GraphSource, names: Option<&str>, simulator: &SimulatorArgs, as_json: bool) -> Result<()> {
    let graph = source.load()?;
    let analysis = Analysis::new(&graph);
    let critical_path_us = graph.critical_path().length_us;
    let width = analysis.width();
    let (rows, failed) = split_rows(compare_rows(&analysis, names, simulator)?);
    let calibration = simulator.config_for(Mode::Graph, &graph)?.calibration();
    let summary = json!({
        "nodes": graph.len(), "edges": graph.edge_count(), "meg_edges": analysis.meg_edge_count(),
        "width": width, "critical_path_us": critical_path_us, "calibration": calibration, "algorithms": rows, "failed": failed,
    });
    let failed: Vec<(String, FailedRow)> = failed.into_iter().map(|row| (String::new(), row)).collect();
    if as_json {
        emit_json(&summary)?;
        return if failed.is_empty() { Ok(()) } else { Err(failed_rows_error(&failed)) };
    }
    emit(&format!(
        "{} nodes, {} edges ({} in the MEG), width {}, critical path {:.1} µs (the floor: no stream assignment runs faster); simulated with the {calibration} calibration; assign ms excludes the shared reachability/MEG analysis\n",
        graph.len(),
        graph.edge_count(),
        analysis.meg_edge_count(),
        width,
        critical_path_us
    ))?;
    let name_width = rows.iter().map(|r| r.algorithm.len()).chain(failed.iter().map(|(_, r)| r.algorithm.len())).max().unwrap_or(0).max(16);
    emit(&format!("{:<name_width$} {:>7} {:>7} {:>9} {:>12} {:>8} {:>12} {:>10}", "algorithm", "streams", "syncs", "max-conc", "graph µs", "x floor", "eager µs", "assign ms"))?;
    for row in &rows {
        emit(&format!(
            "{:<name_width$} {:>7} {:>7} {:>9} {:>12.1} {:>8} {:>12.1} {:>10.3}",
            row.algorithm,
            row.streams,
            row.syncs,
            yes_no(row.max_logical_concurrency),
            row.graph_makespan_us,
            row.graph_over_floor.map_or("-".to_string(), |r| format!("{r:.2}")),
            row.eager_makespan_us,
            row.assign_ms,
        ))?;
    }
    for (_, row) in &failed {
        emit(&format!("{:<name_width$} failed: {}", row.algorithm, row.error))?;
    }
    if failed.is_empty() { Ok(()) } else { Err(failed_rows_error(&failed)) }
}

/// The algorithms named in the comma-separated `names`, or every registered one.
pub fn algorithm_names(names: Option<&str>) -> Vec<String> {
    match names {
        Some(list) => list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect(),
        None => ALGORITHMS.iter().map(|a| a.name.to_string()).collect(),
    }
}

/// Each algorithm of `names` (see `algorithm_names`) on the analysed graph: its plan, checked,
/// timed and simulated in both launch modes; an algorithm whose plan the checker rejects is a
/// failed row (the others still run).
///
/// # Errors
/// An unknown name or argument, an empty list, or a simulator parameter out of range.
pub fn compare_rows(analysis: &Analysis<'_>, names: Option<&str>, simulator: &SimulatorArgs) -> Result<Vec<Result<CompareRow, FailedRow>>> {
    let graph = analysis.graph();
    let named = algorithm_names(names);
    anyhow::ensure!(!named.is_empty(), "--algos {:?} names no algorithm; expected a comma-separated list of registered names (see `nimble-bench algos`)", names.unwrap_or_default());
    let assigners = named.iter().map(|n| algorithms::by_name(n)).collect::<Result<Vec<_>, _>>()?;
    let (graph_config, eager_config) = (simulator.config_for(Mode::Graph, graph)?, simulator.config_for(Mode::Eager, graph)?);
    let critical_path_us = graph.critical_path().length_us;
    let mut rows = Vec::new();
    for assigner in &assigners {
        let started = Instant::now();
        let plan = assigner.assign(analysis);
        let assign_ms = started.elapsed().as_secs_f64() * 1e3;
        let report = match verified(analysis, &plan) {
            Ok(report) => report,
            Err(error) => {
                rows.push(Err(FailedRow { algorithm: assigner.name(), error: error.to_string() }));
                continue;
            }
        };
        let graph_makespan_us = simulate(graph, &plan, &graph_config).makespan_us;
        rows.push(Ok(CompareRow {
            algorithm: plan.algorithm.clone(),
            streams: plan.streams,
            syncs: plan.syncs.len(),
            max_logical_concurrency: report.max_logical_concurrency,
            graph_makespan_us,
            eager_makespan_us: simulate(graph, &plan, &eager_config).makespan_us,
            assign_ms,
            graph_over_floor: (critical_path_us > 0.0).then(|| graph_makespan_us / critical_path_us),
        }));
    }
    Ok(rows)
}

/// An algorithm whose plan the checker rejected, and why.
#[derive(Clone, Debug, Serialize)]
pub struct FailedRow {
    pub algorithm: String,
    pub error: String,
}

/// The rows that ran and the failed ones, apart.
pub fn split_rows(rows: Vec<Result<CompareRow, FailedRow>>) -> (Vec<CompareRow>, Vec<FailedRow>) {
    let (mut ok, mut failed) = (Vec::new(), Vec::new());
    for row in rows {
        match row {
            Ok(row) => ok.push(row),
            Err(row) => failed.push(row),
        }
    }
    (ok, failed)
}

/// The error a command ends with when some algorithms' plans failed the checker.
pub fn failed_rows_error(failed: &[(String, FailedRow)]) -> anyhow::Error {
    let each: Vec<String> = failed.iter().map(|(place, row)| format!("{place}{}", row.error)).collect();
    anyhow::anyhow!("{} plan(s) failed the checker (the other rows above are complete): {}", failed.len(), each.join("; "))
}

/// One algorithm's line of `compare`.
#[derive(Serialize)]
pub struct CompareRow {
    pub algorithm: String,
    pub streams: usize,
    pub syncs: usize,
    pub max_logical_concurrency: bool,
    pub graph_makespan_us: f64,
    pub eager_makespan_us: f64,
    pub assign_ms: f64,
    /// Simulated graph-mode makespan over the critical path (the floor); none without durations.
    pub graph_over_floor: Option<f64>,
}

/// The GPU a directory of task graphs was timed on, from its `provenance.json` (as
/// `experiments/python/kernel_graphs.py` and `export-graph` write it), if it says.
pub fn timed_on(dir: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("provenance.json")).ok()?;
    let provenance: serde_json::Value = serde_json::from_str(&text).ok()?;
    let gpu = provenance["provenance"]["gpu"].as_str().or_else(|| provenance["gpu"].as_str())?;
    Some(gpu.to_string())
}

/// What a simulation's calibration is against the GPU its graphs were timed on: every output
/// that simulates timed graphs names both, and says so when the calibration is not that GPU's
/// (only H200s have fitted calibrations).
pub fn calibration_note(calibrations: &[&str], gpu: Option<&str>) -> String {
    let mut names: Vec<&str> = calibrations.to_vec();
    names.sort_unstable();
    names.dedup();
    let fitted = names.iter().filter(|c| **c != "custom").count();
    let named = if names.is_empty() { "no".to_string() } else { names.join(" and ") };
    let whose = match gpu {
        _ if fitted == 0 => "your parameters (--sim-config or flags), fitted on no GPU this tool knows".to_string(),
        Some(gpu) if gpu.contains("H200") => format!("an H200's, the GPU the graphs were timed on ({gpu})"),
        Some(gpu) => format!("an H200's, not {gpu}'s, on which the graphs were timed (none is fitted for it)"),
        None => "an H200's; the graphs' GPU is not recorded (no provenance.json naming it)".to_string(),
    };
    format!("simulated with the {named} calibration: {whose}")
}

fn yes_no(value: bool) -> &'static str {
    if value { "yes" } else { "no" }
}

