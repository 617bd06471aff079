//! The scheduler from Python on graphs given as the task-graph JSON of docs/cli.md (the Python side
//! turns dicts into that text and back): the registered algorithms, a plan, a simulation.

use crate::errors::input_error;
use nimble_graph::TaskGraph;
use nimble_sched::algorithms::{self, ALGORITHMS};
use nimble_sched::{simulate, verified, Analysis, LaunchMode, RegionPlan, SimulatorConfig, StreamPlan};
use pyo3::prelude::*;
use serde_json::json;
use std::time::Instant;

/// The registered algorithms: `(name, usage, summary)` each.
#[pyfunction]
pub fn algorithms_list() -> Vec<(&'static str, &'static str, &'static str)> {
    ALGORITHMS
        .iter()
        .map(|a| (a.name, a.usage, a.summary))
        .collect()
}

fn graph(text: &str) -> PyResult<TaskGraph> {
    let graph = TaskGraph::from_json_str(text).map_err(input_error)?;
    if graph.is_empty() {
        return Err(input_error("the task graph has no nodes; expected at least one task to schedule"));
    }
    Ok(graph)
}

/// Assigns `graph`'s tasks to streams with `algorithm` and checks the plan (every dependency
/// ordered, on one stream or by a sync).
fn planned<'g>(graph: &'g TaskGraph, algorithm: &str) -> PyResult<(Analysis<'g>, StreamPlan, f64)> {
    let assigner = algorithms::by_name(algorithm).map_err(input_error)?;
    let started = Instant::now();
    let analysis = Analysis::new(graph);
    let plan = assigner.assign(&analysis);
    let assign_ms = started.elapsed().as_secs_f64() * 1e3;
    verified(&analysis, &plan).map_err(|e| crate::errors::raise("NimbleError", e.to_string()))?;
    Ok((analysis, plan, assign_ms))
}

/// The plan of `graph_json` by `algorithm`, as JSON (the CLI's `assign --json` fields plus
/// `assign_ms`).
#[pyfunction]
pub fn assign_json(graph_json: &str, algorithm: &str) -> PyResult<String> {
    let graph = graph(graph_json)?;
    let (analysis, plan, assign_ms) = planned(&graph, algorithm)?;
    let mut out = plan.to_json(&analysis);
    out["assign_ms"] = json!(assign_ms);
    Ok(out.to_string())
}

/// The simulated latency of `algorithm`'s plan for `graph_json` in `mode` (`graph` or `eager`)
/// next to one stream's and the critical path's, as JSON.
#[pyfunction]
pub fn simulate_json(graph_json: &str, algorithm: &str, mode: &str) -> PyResult<String> {
    let mode = match mode {
        "graph" => LaunchMode::Graph,
        "eager" => LaunchMode::Eager,
        other => return Err(input_error(format!("unknown mode `{other}`: expected `graph` (one CUDA-graph launch) or `eager` (kernel by kernel)"))),
    };
    let graph = graph(graph_json)?;
    // The one choice every command makes: the kernel-timed calibration for kernel-timed graphs.
    let config = SimulatorConfig::for_graph(mode, &graph);
    let (analysis, plan, _) = planned(&graph, algorithm)?;
    let single = algorithms::by_name("single")
        .map_err(input_error)?
        .assign(&analysis);
    let result = simulate(&graph, &plan, &config);
    let baseline = simulate(&graph, &single, &config);
    Ok(json!({
        "algorithm": plan.algorithm,
        "mode": mode.name(),
        "calibration": config.calibration(),
        "streams": plan.streams,
        "syncs": plan.syncs.len(),
        "makespan_us": result.makespan_us,
        "single_makespan_us": baseline.makespan_us,
        "speedup_over_single": baseline.makespan_us / result.makespan_us,
        "critical_path_us": graph.critical_path().length_us,
    })
    .to_string())
}

/// `algorithm`'s plan for `graph_json` cut into regions (`nimble_sched::RegionPlan`), as JSON:
/// `plan` (as `assign_json` gives it) and `regions` (`streams`, `regions` with each one's
/// stream and task ids in issue order, `edges` and `syncs` between region indices).
#[pyfunction]
pub fn regions_json(graph_json: &str, algorithm: &str) -> PyResult<String> {
    let graph = graph(graph_json)?;
    let (analysis, plan, assign_ms) = planned(&graph, algorithm)?;
    let regions = RegionPlan::from_plan(&graph, &plan);
    if let Some(violation) = regions.violation(&graph, &plan) {
        return Err(crate::errors::raise("NimbleError", format!("regions of {}'s plan are invalid: {violation}", plan.algorithm)));
    }
    let mut plan_value = plan.to_json(&analysis);
    plan_value["assign_ms"] = json!(assign_ms);
    Ok(json!({"plan": plan_value, "regions": regions.to_json(&graph)}).to_string())
}

/// The plan of a prepared model's graph, as `assign_json` writes it.
pub fn plan_json(graph: &TaskGraph, plan: &StreamPlan) -> String {
    plan.to_json(&Analysis::new(graph)).to_string()
}
