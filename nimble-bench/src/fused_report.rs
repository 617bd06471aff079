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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nimble_graph::TaskGraph;
use nimble_sched::algorithms::{Nimble, Single};
use nimble_sched::{simulate, Analysis, LaunchMode, SimulatorConfig, StreamAssigner};
use serde_json::Value;

use crate::output::emit;

/// One graph's comparison.
struct Compared {
    model: String,
    launch_data: bool,
    single: (f64, f64),
    plan: (f64, f64),
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
    Ok(compare(dir)?.1.iter().filter(|c| c.launch_data).map(Compared::plan_error).collect())
}

/// The GPU `dir`'s graphs were timed on, the graphs compared, the ones without in-graph timings,
/// and the calibration used.
fn compare(dir: &Path) -> Result<(String, Vec<Compared>, Vec<String>, &'static str)> {
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
        let simulated = |plan| simulate(&graph, &plan, &config).makespan_us;
        compared.push(Compared {
            launch_data: graph.nodes().iter().all(|n| n.attrs.contains_key("launches")),
            single: (simulated(Single.assign(&analysis)), single_ms * 1e3),
            plan: (simulated(Nimble { merge_chains: true }.assign(&analysis)), streams_ms * 1e3),
            model,
        });
    }
    Ok((gpu, compared, unmeasured, calibration))
}

/// Runs the report over `dir`, with the whole-call records `whole_call`.
pub fn fused_report(dir: &Path, whole_call: &[PathBuf]) -> Result<()> {
    let (gpu, compared, unmeasured, calibration) = compare(dir)?;
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
    if !whole_call.is_empty() {
        whole_call_report(&averaged, whole_call, &gpu)?;
    }
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

/// The backend's whole-call latency per model from the same-process records (the newest record
/// naming the model wins; records are read in the order given), on `gpu`.
fn whole_call_latencies(records: &[PathBuf], gpu: &str) -> Result<BTreeMap<String, (f64, String)>> {
    let mut latencies = BTreeMap::new();
    for path in records {
        let record: Value = serde_json::from_str(&std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        if record["provenance"]["gpu"].as_str() != Some(gpu) {
            bail!("{}: measured on {}, the graphs on {gpu}; expected records of the same GPU", path.display(), record["provenance"]["gpu"]);
        }
        let date = record["provenance"]["date_utc"].as_str().unwrap_or_default().to_string();
        for row in record["rows"].as_array().into_iter().flatten().filter(|r| r["system"] == "backend") {
            let (Some(model), Some(us)) = (row["model"].as_str(), row["latency"]["median_us"].as_f64()) else { continue };
            let key = format!("{model}-{}-b{}", row["dtype"].as_str().unwrap_or("?"), row["batch"]);
            if latencies.get(&key).is_none_or(|(_, seen): &(f64, String)| *seen < date) {
                latencies.insert(key, (us, date.clone()));
            }
        }
    }
    Ok(latencies)
}

/// The plan's whole-call latency predicted as simulated + a host term fitted on the other
/// models (the median of their measured whole call minus their measured in-graph time).
fn whole_call_report(averaged: &[&Compared], records: &[PathBuf], gpu: &str) -> Result<()> {
    let latencies = whole_call_latencies(records, gpu)?;
    let host: Vec<(&Compared, f64)> = averaged.iter().filter_map(|c| latencies.get(&c.model).map(|(us, _)| (*c, us - c.plan.1))).collect();
    if host.len() < 2 {
        emit(&format!("whole call: {} of the graphs have a whole-call record; leave-one-model-out needs two", host.len()))?;
        return Ok(());
    }
    emit(&format!("{:<28} {:>10} {:>10} {:>10} {:>7}", "whole call (plan)", "host µs", "predicted", "measured", "error"))?;
    let mut errors = Vec::new();
    for (c, _) in &host {
        let mut others: Vec<f64> = host.iter().filter(|(o, _)| o.model != c.model).map(|(_, h)| *h).collect();
        others.sort_by(f64::total_cmp);
        let fitted = others[others.len() / 2];
        let measured = latencies[&c.model].0;
        let predicted = c.plan.0 + fitted;
        let error = (predicted - measured) / measured * 100.0;
        errors.push(error);
        emit(&format!("{:<28} {:>10.1} {:>10.1} {:>10.1} {:>+6.1}%", c.model, fitted, predicted, measured, error))?;
    }
    if let Some((median, worst)) = median_and_worst(&errors) {
        emit(&format!("whole call with the host term, leave-one-model-out, {} models: median |error| {median:.1}%, worst {worst:+.1}%", errors.len()))?;
    }
    Ok(())
}
