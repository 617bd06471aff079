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
//! The kernel-timed calibration was fitted on ATen-op graphs. Beside it the report fits the two
//! parameters that decide a fused-kernel graph's time, leave-one-model-out (a model's graphs at
//! every batch held out together): the latency of a dependency in the graph (each kernel's
//! launch and drain behind the one before it, from the one-stream timings) and the least share
//! of the GPU a running kernel takes (how far small kernels overlap, from the plans' timings);
//! see [`fit`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nimble_graph::TaskGraph;
use nimble_sched::algorithms::{Nimble, Single};
use nimble_sched::{simulate, Analysis, LaunchMode, SimulatorConfig, StreamAssigner, StreamPlan};
use serde_json::Value;

use crate::output::emit;

/// One graph's comparison: (simulated, measured) µs on one stream and under the plan.
struct Compared {
    model: String,
    launch_data: bool,
    single: (f64, f64),
    plan: (f64, f64),
    /// The graph and its two plans, for re-simulating with fitted parameters.
    simulated: Simulated,
}

/// A graph with its one-stream plan and nimble's.
struct Simulated {
    graph: TaskGraph,
    single: StreamPlan,
    plan: StreamPlan,
}

impl Simulated {
    /// The makespans (one stream, plan), µs, under `config`.
    fn makespans(&self, config: &SimulatorConfig) -> (f64, f64) {
        (simulate(&self.graph, &self.single, config).makespan_us, simulate(&self.graph, &self.plan, config).makespan_us)
    }
}

impl Compared {
    fn single_error(&self) -> f64 {
        (self.single.0 - self.single.1) / self.single.1 * 100.0
    }

    fn plan_error(&self) -> f64 {
        (self.plan.0 - self.plan.1) / self.plan.1 * 100.0
    }

    fn speedup_error(&self) -> f64 {
        let (predicted, measured) = (self.single.0 / self.plan.0, self.single.1 / self.plan.1);
        (predicted - measured) / measured * 100.0
    }
}

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
    fitted_report(&averaged)?;
    if !whole_call.is_empty() {
        whole_call_report(&averaged, whole_call, &gpu)?;
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

/// The dependency latencies tried, µs (0 to 2 by 0.1), and the least SM shares (0.2 to 1 by 0.05).
const DEPENDENCY_GRID: std::ops::RangeInclusive<u32> = 0..=20;
const SHARE_GRID: std::ops::RangeInclusive<u32> = 4..=20;

/// The kernel-timed calibration with a dependency latency of `dependency_us` (a dependency
/// between streams `sync_extra_us` more, as calibrated) and a least SM share of `share`.
fn with(dependency_us: f64, share: f64) -> SimulatorConfig {
    let calibrated = SimulatorConfig::kernel_timed();
    let sync_extra_us = calibrated.graph_sync_latency_us.unwrap_or(calibrated.graph_dependency_latency_us) - calibrated.graph_dependency_latency_us;
    // (Rounded to the nanosecond: 0.8 + 0.4 reads 1.2, not 1.2000000000000002.)
    let sync_us = ((dependency_us + sync_extra_us) * 1e3).round() / 1e3;
    SimulatorConfig { graph_dependency_latency_us: dependency_us, graph_sync_latency_us: Some(sync_us), min_sm_share: share, ..calibrated }
}

/// The (median |error|, largest |error|) of `errors`, for ordering fits: the median first.
fn score(errors: &[f64]) -> (f64, f64) {
    median_and_worst(errors).map_or((f64::INFINITY, f64::INFINITY), |(median, worst)| (median, worst.abs()))
}

/// The parameters fitted on `graphs`: the dependency latency that brings the one-stream
/// makespans nearest the one-stream timings (median |error|, then the worst), then with it the
/// least SM share that brings the plans' nearest theirs. One stream has no concurrency, so the
/// share does not change it; the two are fitted one after the other.
fn fit(graphs: &[&Compared]) -> (f64, f64) {
    let best = |candidates: Vec<(f64, (f64, f64))>| candidates.into_iter().min_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal)).map_or(0.0, |(value, _)| value);
    let dependency_us = best(
        DEPENDENCY_GRID
            .map(|i| {
                let d = f64::from(i) / 10.0;
                let config = with(d, SimulatorConfig::kernel_timed().min_sm_share);
                (d, score(&graphs.iter().map(|c| error(simulate(&c.simulated.graph, &c.simulated.single, &config).makespan_us, c.single.1)).collect::<Vec<_>>()))
            })
            .collect(),
    );
    let share = best(
        SHARE_GRID
            .map(|i| {
                let m = f64::from(i) / 20.0;
                let config = with(dependency_us, m);
                (m, score(&graphs.iter().map(|c| error(simulate(&c.simulated.graph, &c.simulated.plan, &config).makespan_us, c.plan.1)).collect::<Vec<_>>()))
            })
            .collect(),
    );
    (dependency_us, share)
}

/// The error of `predicted` against `measured`, %.
fn error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured * 100.0
}

/// The comparison again with the two parameters fitted leave-one-model-out ([`fit`]): each
/// graph simulated with the parameters fitted on the other models' graphs, then the parameters
/// fitted on every graph, as the calibration they would give.
fn fitted_report(averaged: &[&Compared]) -> Result<()> {
    let models: std::collections::BTreeSet<&str> = averaged.iter().map(|c| model_of(&c.model)).collect();
    if models.len() < 2 {
        emit(&format!("fitted leave-one-model-out: {} model(s) with launch data and in-graph timings; it needs two", models.len()))?;
        return Ok(());
    }
    emit(&format!("{:<28} {:>8} {:>6}   {:>10} {:>10} {:>7}   {:>10} {:>10} {:>7}", "fitted, model held out", "dep. µs", "share", "single µs", "measured", "error", "plan µs", "measured", "error"))?;
    let (mut singles, mut plans, mut speedups) = (Vec::new(), Vec::new(), Vec::new());
    for c in averaged {
        let others: Vec<&Compared> = averaged.iter().copied().filter(|o| model_of(&o.model) != model_of(&c.model)).collect();
        let (dependency_us, share) = fit(&others);
        let (single, plan) = c.simulated.makespans(&with(dependency_us, share));
        singles.push(error(single, c.single.1));
        plans.push(error(plan, c.plan.1));
        speedups.push(error(single / plan, c.single.1 / c.plan.1));
        emit(&format!(
            "{:<28} {:>8.1} {:>6.2}   {:>10.1} {:>10.1} {:>+6.1}%   {:>10.1} {:>10.1} {:>+6.1}%",
            c.model, dependency_us, share, single, c.single.1, singles[singles.len() - 1], plan, c.plan.1, plans[plans.len() - 1]
        ))?;
    }
    for (what, errors) in [("one stream", &singles), ("nimble's plan", &plans), ("speedup", &speedups)] {
        if let Some((median, worst)) = median_and_worst(errors) {
            emit(&format!("{what}, in-graph, fitted leave-one-model-out, {} graphs of {} models: median |error| {median:.1}%, worst {worst:+.1}%", errors.len(), models.len()))?;
        }
    }
    let (dependency_us, share) = fit(averaged);
    emit(&format!("fitted on every graph: dependency latency {dependency_us:.1} µs (calibrated {:.1}), least SM share {share:.2} (calibrated {:.2})", SimulatorConfig::kernel_timed().graph_dependency_latency_us, SimulatorConfig::kernel_timed().min_sm_share))?;
    let fitted = with(dependency_us, share);
    let overrides = serde_json::json!({
        "graph_dependency_latency_us": fitted.graph_dependency_latency_us,
        "graph_sync_latency_us": fitted.graph_sync_latency_us,
        "min_sm_share": fitted.min_sm_share,
    });
    emit(&format!("as --sim-config (schedulers --simulate, study): {overrides}"))?;
    Ok(())
}

/// The median |error| and the error of largest magnitude, or none for no errors.
pub fn median_and_worst(errors: &[f64]) -> Option<(f64, f64)> {
    let mut magnitudes: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    magnitudes.sort_by(f64::total_cmp);
    let median = match magnitudes.len() {
        0 => return None,
        n if n % 2 == 1 => magnitudes[n / 2],
        n => (magnitudes[n / 2 - 1] + magnitudes[n / 2]) / 2.0,
    };
    let worst = errors.iter().copied().max_by(|a, b| a.abs().total_cmp(&b.abs()))?;
    Some((median, worst))
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
/// where it chose Inductor's) + a host term fitted on the other models (the median of their
/// measured whole call minus their measured in-graph time of the same program).
fn whole_call_report(averaged: &[&Compared], records: &[PathBuf], gpu: &str) -> Result<()> {
    let calls = whole_calls(records, gpu)?;
    let ran = |c: &Compared, call: &WholeCall| if call.streams { c.plan } else { c.single };
    let host: Vec<(&Compared, f64)> = averaged.iter().filter_map(|c| calls.get(&cell_of(&c.model)).map(|call| (*c, call.us - ran(c, call).1))).collect();
    let models: std::collections::BTreeSet<&str> = host.iter().map(|(c, _)| model_of(&c.model)).collect();
    if models.len() < 2 {
        emit(&format!("whole call: {} model(s) of the graphs have a whole-call record; leave-one-model-out needs two", models.len()))?;
        return Ok(());
    }
    emit(&format!("{:<28} {:>8} {:>10} {:>10} {:>10} {:>7}   {}", "whole call", "program", "host µs", "predicted", "measured", "error", "record"))?;
    let mut errors = Vec::new();
    for (c, _) in &host {
        let mut others: Vec<f64> = host.iter().filter(|(o, _)| model_of(&o.model) != model_of(&c.model)).map(|(_, h)| *h).collect();
        if others.is_empty() {
            emit(&format!("{:<28} no other model has a whole-call record: not predicted", c.model))?;
            continue;
        }
        others.sort_by(f64::total_cmp);
        let fitted = others[others.len() / 2];
        let call = &calls[&cell_of(&c.model)];
        let predicted = ran(c, call).0 + fitted;
        let error = (predicted - call.us) / call.us * 100.0;
        errors.push(error);
        let record = call.record.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
        emit(&format!(
            "{:<28} {:>8} {:>10.1} {:>10.1} {:>10.1} {:>+6.1}%   {record}",
            c.model,
            if call.streams { "plan" } else { "one" },
            fitted,
            predicted,
            call.us,
            error
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
