//! `simulator-report --graphs DIR`: the simulator against what ran, on fused-kernel graphs.
//!
//! A directory of fused-kernel graphs (`experiments/python/kernel_graphs.py`) whose
//! `provenance.json` carries the backend's in-graph timings (`backend.measured_ms`: Inductor's
//! program on one stream, `single`, and the backend's plan on streams, `streams`) is simulated
//! on one stream and under `nimble`'s plan and compared with them, latency and speedup. Only
//! graphs whose kernels carry launch data (`launches`: grid, block, registers, shared memory,
//! occupancy) are averaged; the others are listed as such. With `--whole-call` records
//! (same-process, the backend's latency per call), a per-call host term (the call's time beyond
//! its graph: guards, input copies, the launch) is added, fitted leave-one-model-out: each
//! model's from the other models' records only.
//!
//! The kernel-timed calibration was fitted on ATen-op graphs. Beside it the report fits the three
//! parameters that decide a fused-kernel graph's time, leave-one-model-out (a model's graphs at
//! every batch held out together): the latency of a dependency in the graph (each kernel's
//! launch and drain behind the one before it, from the one-stream timings), then, from the
//! plans' timings, the latency of a dependency between streams and the least share of the GPU
//! a running kernel takes (how far small kernels overlap); see [`fit`]. The whole call is
//! predicted from the graph under the parameters fitted without its model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nimble_graph::TaskGraph;
use nimble_sched::algorithms::{Nimble, Single};
use nimble_sched::{Analysis, LaunchMode, SimulatorConfig, StreamAssigner};
use serde_json::Value;

use crate::fused_fit::{error, fit, median_and_worst, Compared, Fitted, Simulated};
use crate::output::emit;

/// The plan's in-graph errors (%) on the graphs of `dir` with launch data and in-graph timings:
/// the simulator's validated error on fused kernels, which `study` draws as its band.
pub fn plan_errors(dir: &Path) -> Result<Vec<f64>> {
    Ok(compare(dir)?.compared.iter().filter(|c| c.launch_data).map(Compared::plan_error).collect())
}

/// What `dir` holds for the comparison.
struct Directory {
    /// The GPU its graphs were timed on.
    gpu: String,
    compared: Vec<Compared>,
    /// The graphs without in-graph timings.
    unmeasured: Vec<String>,
    /// The calibration simulated with.
    calibration: &'static str,
    /// Whether some run timed the backend after the profiler ran in its process (every run of
    /// `kernel_graphs.py` before it said `backend_timed`), which reads the timings high.
    timed_after_profiler: bool,
}

/// The comparison of the graphs in `dir` with their in-graph timings.
fn compare(dir: &Path) -> Result<Directory> {
    let provenance_path = dir.join("provenance.json");
    let provenance: Value = serde_json::from_str(&std::fs::read_to_string(&provenance_path).with_context(|| format!("reading {}", provenance_path.display()))?)
        .with_context(|| format!("{} is not JSON", provenance_path.display()))?;
    let gpu = provenance["provenance"]["gpu"].as_str().unwrap_or("an unnamed GPU").to_string();
    let Some(graphs) = provenance["graphs"].as_array() else {
        bail!("{}: no `graphs` list; expected a fused-kernel graph directory written by experiments/python/kernel_graphs.py", provenance_path.display());
    };
    let mut compared = Vec::new();
    let mut unmeasured = Vec::new();
    let mut calibration = "";
    for entry in graphs {
        let file = entry["file"].as_str().context("a graph entry without `file`")?;
        let model = file.split('.').next().unwrap_or(file).to_string();
        let measured = &entry["backend"]["measured_ms"];
        let (Some(single_ms), Some(streams_ms)) = (measured["single"].as_f64(), measured["streams"].as_f64()) else {
            unmeasured.push(model);
            continue;
        };
        let path = [dir.join(file), dir.join(format!("{file}.gz"))].into_iter().find(|p| p.exists()).with_context(|| format!("{file} (or {file}.gz) is not in {}", dir.display()))?;
        let graph = TaskGraph::read_json(&path).with_context(|| format!("reading {}", path.display()))?;
        let config = SimulatorConfig::for_graph(LaunchMode::Graph, &graph);
        calibration = config.calibration();
        let analysis = Analysis::new(&graph);
        let (single, plan) = (Single.assign(&analysis), Nimble { merge_chains: true }.assign(&analysis));
        let simulated = Simulated { graph, single, plan };
        let (single_us, plan_us) = simulated.makespans(&config);
        compared.push(Compared {
            launch_data: simulated.graph.nodes().iter().all(|n| n.attrs.contains_key("launches")),
            single: (single_us, single_ms * 1e3),
            plan: (plan_us, streams_ms * 1e3),
            model,
            simulated,
        });
    }
    let runs = provenance["runs"].as_array().cloned().unwrap_or_else(|| vec![provenance["provenance"].clone()]);
    let timed_after_profiler = runs.iter().any(|run| run.get("backend_timed").is_none());
    Ok(Directory { gpu, compared, unmeasured, calibration, timed_after_profiler })
}

/// Runs the report over `dir`, with the whole-call records `whole_call`.
pub fn fused_report(dir: &Path, whole_call: &[PathBuf]) -> Result<()> {
    let Directory { gpu, compared, unmeasured, calibration, timed_after_profiler } = compare(dir)?;
    if compared.is_empty() {
        emit(&format!(
            "{}: timed on {gpu}; no graph has the backend's in-graph timings (graphs[].backend.measured_ms in its provenance.json), nothing to compare: {}",
            dir.display(),
            unmeasured.join(", ")
        ))?;
        return Ok(());
    }
    emit(&format!("{}: timed on {gpu}; {}", dir.display(), crate::scheduling::calibration_note(&[calibration], Some(&gpu))))?;
    emit(&format!("{:<28} {:>10} {:>10} {:>7}   {:>10} {:>10} {:>7}   {:>9} {:>9}", "graph", "single µs", "measured", "error", "plan µs", "measured", "error", "speedup", "measured"))?;
    for c in &compared {
        emit(&format!(
            "{:<28} {:>10.1} {:>10.1} {:>+6.1}%   {:>10.1} {:>10.1} {:>+6.1}%   {:>8.2}× {:>8.2}×{}",
            c.model,
            c.single.0,
            c.single.1,
            c.single_error(),
            c.plan.0,
            c.plan.1,
            c.plan_error(),
            c.single.0 / c.plan.0,
            c.single.1 / c.plan.1,
            if c.launch_data { "" } else { "  (no launch data: not averaged)" }
        ))?;
    }
    let averaged: Vec<&Compared> = compared.iter().filter(|c| c.launch_data).collect();
    for (what, errors) in [
        ("one stream", averaged.iter().map(|c| c.single_error()).collect::<Vec<_>>()),
        ("nimble's plan", averaged.iter().map(|c| c.plan_error()).collect()),
        ("speedup", averaged.iter().map(|c| c.speedup_error()).collect()),
    ] {
        if let Some((median, worst)) = median_and_worst(&errors) {
            emit(&format!("{what}, in-graph, {} graphs with launch data: median |error| {median:.1}%, worst {worst:+.1}%", errors.len()))?;
        }
    }
    if !unmeasured.is_empty() {
        emit(&format!("without the backend's in-graph timings (not compared): {}", unmeasured.join(", ")))?;
    }
    if timed_after_profiler {
        emit("in-graph timings taken after the profiler ran in the same process (a run before kernel_graphs.py timed the backend first): they read high, on streams most")?;
    }
    let fitted = fitted_report(&averaged)?;
    if !whole_call.is_empty() {
        whole_call_report(&averaged, &fitted, whole_call, &gpu)?;
    }
    Ok(())
}

/// The model a graph is of: its name without the dtype and batch (`googlenet-float32-b16` is
/// `googlenet`), so that leave-one-model-out holds out every batch of it.
fn model_of(graph: &str) -> &str {
    ["-float32", "-bfloat16", "-float16"].iter().find_map(|dtype| graph.find(dtype).map(|at| &graph[..at])).unwrap_or(graph)
}

/// The cell a graph is of, as the same-process records key it: `googlenet-float32-b16`, and a
/// graph named without its batch (batch 1) `googlenet-float32-b1`.
fn cell_of(graph: &str) -> String {
    let batched = graph.rsplit_once("-b").is_some_and(|(_, batch)| !batch.is_empty() && batch.bytes().all(|b| b.is_ascii_digit()));
    if batched {
        graph.to_string()
    } else {
        format!("{graph}-b1")
    }
}

/// The comparison again with the three parameters fitted leave-one-model-out ([`fit`]): each
/// graph simulated with the parameters fitted on the other models' graphs, then the parameters
/// fitted on every graph, as the calibration they would give. Returns each graph's makespans
/// (one stream, plan) under the parameters fitted without its model, for the whole call.
fn fitted_report(averaged: &[&Compared]) -> Result<Vec<(f64, f64)>> {
    let models: std::collections::BTreeSet<&str> = averaged.iter().map(|c| model_of(&c.model)).collect();
    if models.len() < 2 {
        emit(&format!("fitted leave-one-model-out: {} model(s) with launch data and in-graph timings; it needs two", models.len()))?;
        return Ok(averaged.iter().map(|c| (c.single.0, c.plan.0)).collect());
    }
    emit(&format!(
        "{:<28} {:>8} {:>8} {:>6}   {:>10} {:>10} {:>7}   {:>10} {:>10} {:>7}",
        "fitted, model held out", "dep. µs", "sync µs", "share", "single µs", "measured", "error", "plan µs", "measured", "error"
    ))?;
    let (mut singles, mut plans, mut speedups, mut makespans) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for c in averaged {
        let others: Vec<&Compared> = averaged.iter().copied().filter(|o| model_of(&o.model) != model_of(&c.model)).collect();
        let fitted = fit(&others);
        let (single, plan) = c.simulated.makespans(&fitted.config());
        makespans.push((single, plan));
        singles.push(error(single, c.single.1));
        plans.push(error(plan, c.plan.1));
        speedups.push(error(single / plan, c.single.1 / c.plan.1));
        emit(&format!(
            "{:<28} {:>8.1} {:>8.2} {:>6.2}   {:>10.1} {:>10.1} {:>+6.1}%   {:>10.1} {:>10.1} {:>+6.1}%",
            c.model,
            fitted.dependency_us,
            fitted.sync_us,
            fitted.share,
            single,
            c.single.1,
            singles[singles.len() - 1],
            plan,
            c.plan.1,
            plans[plans.len() - 1]
        ))?;
    }
    for (what, errors) in [("one stream", &singles), ("nimble's plan", &plans), ("speedup", &speedups)] {
        if let Some((median, worst)) = median_and_worst(errors) {
            emit(&format!("{what}, in-graph, fitted leave-one-model-out, {} graphs of {} models: median |error| {median:.1}%, worst {worst:+.1}%", errors.len(), models.len()))?;
        }
    }
    let fitted = fit(averaged);
    let calibrated = Fitted::calibrated();
    let edges = fitted.on_grid_edges();
    emit(&format!(
        "fitted on every graph: dependency latency {:.1} µs (calibrated {:.1}), between streams {:.2} µs (calibrated {:.1}), least SM share {:.2} (calibrated {:.2}){}",
        fitted.dependency_us,
        calibrated.dependency_us,
        fitted.sync_us,
        calibrated.sync_us,
        fitted.share,
        calibrated.share,
        if edges.is_empty() { String::new() } else { format!("; on the edge of the grid tried: {}", edges.join(", ")) }
    ))?;
    let overrides = serde_json::json!({
        "graph_dependency_latency_us": fitted.dependency_us,
        "graph_sync_latency_us": fitted.sync_us,
        "min_sm_share": fitted.share,
    });
    emit(&format!("as --sim-config (schedulers --simulate, study): {overrides}"))?;
    Ok(makespans)
}

/// One cell's whole call through the backend, from a same-process record.
struct WholeCall {
    /// The median latency of a call, µs.
    us: f64,
    /// When it was measured (the record's date), and the record.
    date: String,
    record: PathBuf,
    /// The program the backend ran: its choice, `streams` (or `critical`) or `single`.
    streams: bool,
}

/// Every JSON file under `paths` (a file as it is, a directory walked), sorted.
fn json_files(paths: &[PathBuf]) -> Result<Vec<(PathBuf, bool)>> {
    let mut found = Vec::new();
    for path in paths {
        if path.is_dir() {
            found.extend(crate::records_index::files_under(path)?.into_iter().filter(|f| f.extension().is_some_and(|e| e == "json")).map(|f| (f, true)));
        } else {
            found.push((path.clone(), false));
        }
    }
    found.sort();
    Ok(found)
}

/// The backend's whole call per cell (`model-dtype-bB`) from the same-process records under
/// `paths` (files, or directories walked for them) measured on `gpu`: the newest record of a
/// cell wins. A file named alone must be of that GPU; in a directory, records of other GPUs and
/// other JSON files are passed over. Only cells the backend compiled as one graph count (its
/// choice is that graph's).
fn whole_calls(paths: &[PathBuf], gpu: &str) -> Result<BTreeMap<String, WholeCall>> {
    let mut calls: BTreeMap<String, WholeCall> = BTreeMap::new();
    for (path, walked) in json_files(paths)? {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let record: Value = match serde_json::from_str(&text) {
            Ok(record) => record,
            Err(_) if walked => continue,
            Err(e) => return Err(e).with_context(|| format!("{} is not JSON", path.display())),
        };
        if record["provenance"]["gpu"].as_str() != Some(gpu) {
            if walked {
                continue;
            }
            bail!("{}: measured on {}, the graphs on {gpu}; expected records of the same GPU", path.display(), record["provenance"]["gpu"]);
        }
        let date = record["provenance"]["date_utc"].as_str().unwrap_or_default().to_string();
        for row in record["rows"].as_array().into_iter().flatten().filter(|r| r["system"] == "backend") {
            let (Some(model), Some(us)) = (row["model"].as_str(), row["latency"]["median_us"].as_f64()) else { continue };
            let graphs = row["backend_graphs"].as_array();
            let streams = match graphs.map(Vec::as_slice) {
                Some([graph]) => graph["choice"].as_str().is_some_and(|c| c != "single"),
                Some(_) => continue,
                None => true, // records before the reports were kept: the plan, as then measured
            };
            let key = format!("{model}-{}-b{}", row["dtype"].as_str().unwrap_or("?"), row["batch"]);
            if calls.get(&key).is_none_or(|seen| seen.date < date) {
                calls.insert(key, WholeCall { us, date: date.clone(), record: path.clone(), streams });
            }
        }
    }
    Ok(calls)
}

/// The whole call predicted as the simulated program the backend ran (its plan, or one stream
/// where it chose Inductor's), each graph under the parameters fitted without its model
/// (`fitted`: (one stream, plan) µs, one per graph of `averaged`), + a host term fitted on the
/// other models (the median of their measured whole call minus their measured in-graph time of
/// the same program).
fn whole_call_report(averaged: &[&Compared], fitted: &[(f64, f64)], records: &[PathBuf], gpu: &str) -> Result<()> {
    let calls = whole_calls(records, gpu)?;
    let ran = |c: &Compared, call: &WholeCall| if call.streams { c.plan.1 } else { c.single.1 };
    // (graph, its fitted makespans, its whole call, the host time measured beside it)
    let host: Vec<(&Compared, (f64, f64), &WholeCall, f64)> = averaged
        .iter()
        .zip(fitted)
        .filter_map(|(c, makespans)| calls.get(&cell_of(&c.model)).map(|call| (*c, *makespans, call, call.us - ran(c, call))))
        .collect();
    let models: std::collections::BTreeSet<&str> = host.iter().map(|(c, ..)| model_of(&c.model)).collect();
    if models.len() < 2 {
        emit(&format!("whole call: {} model(s) of the graphs have a whole-call record; leave-one-model-out needs two", models.len()))?;
        return Ok(());
    }
    emit(&format!("{:<28} {:>8} {:>10} {:>10} {:>10} {:>7}   {}", "whole call", "program", "host µs", "predicted", "measured", "error", "record"))?;
    let mut errors = Vec::new();
    for (c, (single, plan), call, _) in &host {
        let mut others: Vec<f64> = host.iter().filter(|(o, ..)| model_of(&o.model) != model_of(&c.model)).map(|(.., h)| *h).collect();
        others.sort_by(f64::total_cmp);
        let host_us = others[others.len() / 2];
        let predicted = if call.streams { plan } else { single } + host_us;
        let off = error(predicted, call.us);
        errors.push(off);
        let record = call.record.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
        emit(&format!(
            "{:<28} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>+6.1}%   {record}",
            c.model,
            if call.streams { "plan" } else { "one" },
            host_us,
            predicted,
            call.us,
            off
        ))?;
    }
    if let Some((median, worst)) = median_and_worst(&errors) {
        emit(&format!("whole call with the host term, leave-one-model-out, {} graphs of {} models: median |error| {median:.1}%, worst {worst:+.1}%", errors.len(), models.len()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graphs_are_held_out_by_model_and_keyed_by_cell() {
        assert_eq!(model_of("googlenet-float32-b16"), "googlenet");
        assert_eq!(model_of("inception-v3-float32"), "inception-v3");
        assert_eq!(model_of("llama-bfloat16"), "llama");
        assert_eq!(model_of("unnamed"), "unnamed");
        assert_eq!(cell_of("googlenet-float32-b16"), "googlenet-float32-b16");
        assert_eq!(cell_of("googlenet-float32"), "googlenet-float32-b1");
        assert_eq!(cell_of("efficientnet-b0-float32"), "efficientnet-b0-float32-b1");
    }
}
