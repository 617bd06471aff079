//! `schedulers --simulate`: the research loop without a GPU. Every registered algorithm (or the
//! chosen ones) on every committed model task graph (`*.graph.json`, each op's GPU time
//! measured on the GPU): streams, syncs, assignment time, simulated latency of the graph launch,
//! speedup over one stream and latency over the floor (the critical path, which no stream
//! assignment beats). A table, a JSON record and a figure; a newly registered algorithm appears
//! in all three with no other change.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use nimble_graph::TaskGraph;
use nimble_sched::algorithms::Single;
use nimble_sched::{simulate, Analysis, StreamAssigner};
use serde::Serialize;
use serde_json::json;

use crate::bars::{draw_grouped, Group, PALETTE};
use crate::output::{emit, write_file};
use crate::scheduling::{compare_rows, failed_rows_error, split_rows, CompareRow, FailedRow, Mode, SimulatorArgs};

/// What `schedulers --simulate` reads and writes.
pub struct SimulateArgs<'a> {
    /// Comma-separated model names (file names up to their first `.`), or `all`.
    pub models: &'a str,
    pub algorithms: Option<&'a str>,
    /// The directory of `*.graph.json` task graphs.
    pub graphs: &'a Path,
    pub simulator: &'a SimulatorArgs,
    /// Where to write the record, if anywhere.
    pub results: Option<&'a Path>,
    pub out_dir: &'a Path,
    /// A measured `schedulers` record to validate against (models and algorithms it has).
    pub measured: Option<&'a Path>,
}

/// Measured median latency per (model, algorithm name without arguments), µs.
pub(crate) fn measured_latencies(path: &Path) -> Result<std::collections::BTreeMap<(String, String), f64>> {
    let text = nimble_graph::json::read_text(path).with_context(|| format!("reading {}", path.display()))?;
    let record: serde_json::Value = serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let mut out = std::collections::BTreeMap::new();
    for m in record["models"].as_array().with_context(|| format!("{}: no `models` array (expected a `schedulers` record)", path.display()))? {
        let model = m["model"].as_str().with_context(|| format!("{}: a model without `model`", path.display()))?;
        for r in m["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]) {
            if let (Some(algorithm), Some(median)) = (r["algorithm"].as_str(), r["latency"]["median_us"].as_f64()) {
                out.insert((model.to_string(), algorithm.to_string()), median);
            }
        }
    }
    Ok(out)
}

/// `algorithm` without its arguments (`round-robin:4` -> `round-robin`).
pub(crate) fn base_name(algorithm: &str) -> &str {
    algorithm.split(':').next().unwrap_or(algorithm)
}

/// One model's graph and every algorithm's row.
#[derive(Serialize)]
struct ModelRows {
    model: String,
    file: String,
    nodes: usize,
    width: usize,
    /// The critical path by the graph's durations, µs: the latency no assignment beats.
    floor_us: f64,
    rows: Vec<CompareRow>,
    /// The algorithms whose plans the checker rejected on this graph.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failed: Vec<FailedRow>,
    /// One stream's simulated latency, the `x single` baseline (a row of its own when listed).
    #[serde(skip)]
    single_us: f64,
    /// Per row, the measured median latency (µs) when the measured record has it.
    measured_us: Vec<Option<f64>>,
    /// Per row, the measured latency over the floor: the headroom a better assignment could
    /// take (launch and synchronization costs sit in it too).
    measured_over_floor: Vec<Option<f64>>,
    /// The simulator's parameters for this graph (kernel-timed graphs get their own).
    simulator: nimble_sched::SimulatorConfig,
}

/// The model task graphs of `dir` (sorted by file name), with their model names.
pub(crate) fn model_graphs(dir: &Path, models: &str) -> Result<Vec<(String, PathBuf)>> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".graph.json") || n.ends_with(".graph.json.gz")))
        .collect();
    files.sort();
    let wanted: Option<Vec<&str>> = (models != "all").then(|| models.split(',').map(str::trim).collect());
    let named: Vec<(String, PathBuf)> = files
        .into_iter()
        .map(|p| (p.file_name().and_then(|n| n.to_str()).and_then(|n| n.split('.').next()).unwrap_or_default().to_string(), p))
        .filter(|(name, _)| wanted.as_ref().is_none_or(|w| w.contains(&name.as_str())))
        .collect();
    if let Some(wanted) = &wanted {
        if let Some(missing) = wanted.iter().find(|w| !named.iter().any(|(n, _)| n == *w)) {
            bail!("no task graph for model `{missing}` in {} (expected {missing}.*graph.json)", dir.display());
        }
    }
    if named.is_empty() {
        bail!(
            "no model task graphs (*.graph.json or *.graph.json.gz) in {}; make one on a GPU machine with `nimble-bench export-graph --model M --device cuda --optimize --out {}/M.graph.json`",
            dir.display(),
            dir.display()
        );
    }
    Ok(named)
}

/// Runs `schedulers --simulate`.
pub fn simulate_schedulers(args: &SimulateArgs<'_>) -> Result<()> {
    let measured = args.measured.map(measured_latencies).transpose()?.unwrap_or_default();
    let mut models = Vec::new();
    let mut failed = Vec::new();
    for (model, path) in model_graphs(args.graphs, args.models)? {
        let graph = TaskGraph::read_json(&path).with_context(|| format!("reading {}", path.display()))?;
        if graph.nodes().iter().all(|n| n.duration_us.is_none()) {
            bail!("{}: no node has a duration_us; export the graph with --device cuda so each op's GPU time is measured", path.display());
        }
        let analysis = Analysis::new(&graph);
        let (rows, failed_here) = split_rows(compare_rows(&analysis, args.algorithms, args.simulator).with_context(|| format!("model {model} ({})", path.display()))?);
        failed.extend(failed_here.iter().map(|row| (format!("model {model}: "), row.clone())));
        // One stream's latency, the baseline of `x single`, whether or not `single` is listed.
        let simulator = args.simulator.config_for(Mode::Graph, &graph)?;
        let single_us = match rows.iter().find(|r| r.algorithm == "single") {
            Some(row) => row.graph_makespan_us,
            None => simulate(&graph, &Single.assign(&analysis), &simulator).makespan_us,
        };
        let measured_us: Vec<Option<f64>> = rows.iter().map(|r| measured.get(&(model.clone(), base_name(&r.algorithm).to_string())).copied()).collect();
        let floor_us = graph.critical_path().length_us;
        let measured_over_floor = measured_us.iter().map(|m| m.filter(|_| floor_us > 0.0).map(|t| t / floor_us)).collect();
        models.push(ModelRows {
            model,
            file: path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string(),
            nodes: graph.len(),
            width: analysis.width(),
            floor_us,
            rows,
            failed: failed_here,
            single_us,
            measured_us,
            measured_over_floor,
            simulator,
        });
    }
    // Simulated against measured, where the record has the run.
    let mut errors: Vec<(f64, String)> = models
        .iter()
        .flat_map(|m| m.rows.iter().zip(&m.measured_us).filter_map(move |(r, meas)| meas.map(|t| ((r.graph_makespan_us - t) / t * 100.0, format!("{} {}", m.model, r.algorithm)))))
        .collect();
    errors.sort_by(|a, b| a.0.abs().total_cmp(&b.0.abs()));
    let validation = (!errors.is_empty()).then(|| {
        let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize].0.abs();
        let worst = errors.last().expect("not empty");
        json!({
            "measured": args.measured.map(|p| p.display().to_string()),
            "runs": errors.len(),
            "median_abs_error_pct": at(0.5),
            "p90_abs_error_pct": at(0.9),
            "worst_error_pct": worst.0,
            "worst": worst.1,
        })
    });
    let gpu = crate::scheduling::timed_on(args.graphs);
    let calibrations: Vec<&str> = models.iter().map(|m| m.simulator.calibration()).collect();
    let calibration = crate::scheduling::calibration_note(&calibrations, gpu.as_deref());
    let record = json!({
        "experiment": "schedulers-simulated",
        "provenance": {
            "commit": experiments::record::build_commit(),
            "date_utc": experiments::record::now_utc(),
            "machine": "any (no GPU): the latencies are simulated; assign_ms is this machine's CPU time",
        },
        "method": "each committed model task graph (per-op GPU times as exported) assigned by each algorithm, the plan checked, and its CUDA-graph launch simulated; no GPU",
        "graphs_dir": args.graphs.display().to_string(),
        "timed_on": gpu,
        "calibration": calibration,
        "validation": validation,
        "models": models,
    });
    if let Some(path) = args.results {
        write_file(path, &serde_json::to_string_pretty(&record)?)?;
    }
    // Every algorithm that planned some graph, in the order asked; columns as wide as the names.
    let mut algorithms: Vec<String> = Vec::new();
    for m in &models {
        for name in m.rows.iter().map(|r| &r.algorithm).chain(m.failed.iter().map(|f| &f.algorithm)) {
            if !algorithms.contains(name) {
                algorithms.push(name.clone());
            }
        }
    }
    let model_width = models.iter().map(|m| m.model.len()).max().unwrap_or(0).max(18);
    let name_width = algorithms.iter().map(String::len).max().unwrap_or(0).max(14);
    let mut lines = vec![format!("{}: {calibration}", args.graphs.display()), format!(
        "{:<model_width$} {:<name_width$} {:>7} {:>6} {:>10} {:>11} {:>9} {:>8} {:>11} {:>7} {:>8}",
        "model", "algorithm", "streams", "syncs", "assign ms", "simulated", "x single", "x floor", "measured", "error", "x floor"
    )];
    let mut groups = Vec::new();
    for m in &models {
        let single = Some(m.single_us).filter(|&us| us > 0.0);
        for ((r, meas), over) in m.rows.iter().zip(&m.measured_us).zip(&m.measured_over_floor) {
            lines.push(format!(
                "{:<model_width$} {:<name_width$} {:>7} {:>6} {:>10.3} {:>8.1} µs {:>9} {:>8} {:>11} {:>7} {:>8}",
                m.model,
                r.algorithm,
                r.streams,
                r.syncs,
                r.assign_ms,
                r.graph_makespan_us,
                single.map_or("-".to_string(), |s| format!("{:.2}", s / r.graph_makespan_us)),
                r.graph_over_floor.map_or("-".to_string(), |f| format!("{f:.2}")),
                meas.map_or("-".to_string(), |t| format!("{t:.1} µs")),
                meas.map_or("-".to_string(), |t| format!("{:+.1}%", (r.graph_makespan_us - t) / t * 100.0)),
                over.map_or("-".to_string(), |f| format!("{f:.2}")),
            ));
        }
        for f in &m.failed {
            lines.push(format!("{:<model_width$} {:<name_width$} failed: {}", m.model, f.algorithm, f.error));
        }
        lines.push(format!("{:<model_width$} floor (critical path) {:.1} µs, {} tasks, width {}", "", m.floor_us, m.nodes, m.width));
        // Bars: each algorithm's simulated speedup over one stream (simulated when `single` is not listed), and the
        // bound the floor sets on it.
        let base = single.unwrap_or(f64::NAN);
        let speedup = |us: f64| if base.is_finite() && us > 0.0 { base / us } else { 0.0 };
        // A failed algorithm's bar is empty.
        let mut values: Vec<f64> = algorithms.iter().map(|a| m.rows.iter().find(|r| &r.algorithm == a).map_or(0.0, |r| speedup(r.graph_makespan_us))).collect();
        values.push(speedup(m.floor_us));
        groups.push(Group { label: m.model.clone(), values });
    }
    let mut series: Vec<(&str, plotters::style::RGBColor)> = algorithms.iter().enumerate().map(|(i, a)| (a.as_str(), PALETTE[i % PALETTE.len()])).collect();
    series.push(("floor (bound)", plotters::style::RGBColor(160, 160, 160)));
    std::fs::create_dir_all(args.out_dir).with_context(|| format!("creating {}", args.out_dir.display()))?;
    let svg = args.out_dir.join("schedulers-simulated.svg");
    let notes = [
        format!("Simulated (nimble-sched's simulator, graph launch) on the task graphs in {}; no GPU; {calibration}.", args.graphs.display()),
        "Per-op times as exported: kernel-timed graphs carry each op's own kernel time (see docs/research.md, the simulator).".to_string(),
        "floor (bound): one stream's simulated latency over the critical path, which no assignment beats.".to_string(),
    ];
    draw_grouped(&svg, ("Stream-assignment algorithms, simulated: speedup over one stream", "simulated speedup over one stream (×)"), &groups, &series, &notes)?;
    if validation.is_some() {
        let validation_svg = args.out_dir.join("schedulers-validation.svg");
        // Only the algorithms and models the measured record has: a coverage-set record measures
        // one stream and Nimble only.
        let series: Vec<crate::plots::Series> = algorithms
            .iter()
            .enumerate()
            .map(|(i, algorithm)| {
                let points: Vec<(f64, f64)> = models
                    .iter()
                    .flat_map(|m| m.rows.iter().zip(&m.measured_us).filter(|(r, _)| &r.algorithm == algorithm).filter_map(|(r, meas)| meas.map(|t| (t, r.graph_makespan_us))))
                    .collect();
                (algorithm.clone(), PALETTE[i % PALETTE.len()], points)
            })
            .filter(|(_, _, points)| !points.is_empty())
            .collect();
        let measured_models = models.iter().filter(|m| m.measured_us.iter().any(Option::is_some)).count();
        let title = format!("Simulated vs measured, {measured_models} models x {} algorithms (graph launch)", series.len());
        crate::plots::save(&crate::plots::SimulatedVsMeasured::of_series(title, series)?, &validation_svg)?;
        lines.push(format!("validation figure: {}", validation_svg.display()));
    }
    if let Some(v) = &validation {
        lines.push(format!(
            "simulated against measured ({}), {} runs: median |error| {:.1}%, 90th percentile {:.1}%, worst {:+.1}% ({})",
            args.measured.map(|p| p.display().to_string()).unwrap_or_default(),
            v["runs"],
            v["median_abs_error_pct"].as_f64().unwrap_or(f64::NAN),
            v["p90_abs_error_pct"].as_f64().unwrap_or(f64::NAN),
            v["worst_error_pct"].as_f64().unwrap_or(f64::NAN),
            v["worst"].as_str().unwrap_or_default()
        ));
    }
    let record_line = args.results.map_or("record: not written (give --results FILE to write it)".to_string(), |p| format!("record: {}", p.display()));
    lines.push(format!("{record_line}\nfigure: {}", svg.display()));
    emit(&lines.join("\n"))?;
    if failed.is_empty() { Ok(()) } else { Err(failed_rows_error(&failed)) }
}
