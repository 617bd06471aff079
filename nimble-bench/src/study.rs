//! `study`: policies × graph sets (the zoo's kernel-timed graphs, the 86-model coverage set,
//! Inductor's fused kernels) simulated, as a table, a figure with the simulator's validated
//! error as bands, and a record with its provenance, all in the directory given.
//!
//! A set's band is the simulator's median |error| against measurements of that kind of graph:
//! the zoo's and the coverage set's from their committed measured records (every pair of model
//! and algorithm both have), the fused kernels' from the backend's in-graph timings of the
//! graphs with launch data (`simulator-report --graphs`).

use std::path::Path;

use anyhow::{bail, Context, Result};
use nimble_graph::TaskGraph;
use nimble_sched::algorithms::Single;
use nimble_sched::{simulate, Analysis, StreamAssigner};
use serde_json::json;

use crate::bars::{draw_grouped_with_bands, Group, PALETTE};
use crate::fused_fit::median_and_worst;
use crate::fused_report::plan_errors;
use crate::output::{emit, write_file};
use crate::research::{base_name, measured_latencies, model_graphs};
use crate::scheduling::{compare_rows, failed_rows_error, split_rows, FailedRow, Mode, SimulatorArgs};

/// One graph set of the study.
struct GraphSet {
    name: &'static str,
    graphs: &'static str,
    /// Where the simulator's error on such graphs was measured.
    validation: Validation,
}

enum Validation {
    /// A `schedulers`-style record of measured latencies for the same graphs.
    Measured(&'static str),
    /// The backend's in-graph timings of fused-kernel graphs with launch data.
    InGraph(&'static str),
}

const SETS: [GraphSet; 3] = [
    GraphSet { name: "zoo", graphs: "paper-figs/results/model-graphs", validation: Validation::Measured("paper-figs/results/schedulers.json") },
    GraphSet { name: "coverage", graphs: "paper-figs/results/coverage-graphs", validation: Validation::Measured("paper-figs/results/coverage-graphs/measured.json") },
    GraphSet { name: "fused-kernel", graphs: "paper-figs/results/fused-kernel-graphs", validation: Validation::InGraph("paper-figs/results/fused-kernel-graphs-launches-h100") },
];

/// What one policy did on one set.
struct Summary {
    algorithm: String,
    speedups: Vec<f64>,
}

fn geomean(values: &[f64]) -> f64 {
    (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp()
}

/// Runs the study of `algorithms` (comma-separated) from the checkout at `root`, writing
/// `study.json`, `study.svg` and `study.png` into `out_dir`.
pub fn study(root: &Path, algorithms: &str, out_dir: &Path, simulator: &SimulatorArgs) -> Result<()> {
    if out_dir.exists() && !out_dir.is_dir() {
        bail!("--out-dir {}: not a directory; expected a directory to write study.json and study.svg into", out_dir.display());
    }
    let mut sets = Vec::new();
    let mut failed: Vec<(String, FailedRow)> = Vec::new();
    let mut lines = vec![format!("{:<13} {:<18} {:>6} {:>12} {:>9} {:>9} {:>8}", "graphs", "algorithm", "graphs", "x one stream", "min", "max", "band ±")];
    for set in &SETS {
        let dir = root.join(set.graphs);
        let mut summaries: Vec<Summary> = Vec::new();
        let mut per_graph = Vec::new();
        let mut simulated = std::collections::BTreeMap::new();
        for (model, path) in model_graphs(&dir, "all")? {
            let graph = TaskGraph::read_json(&path).with_context(|| format!("reading {}", path.display()))?;
            let analysis = Analysis::new(&graph);
            let config = simulator.config_for(Mode::Graph, &graph)?;
            let single_us = simulate(&graph, &Single.assign(&analysis), &config).makespan_us;
            let (rows, failed_here) = split_rows(compare_rows(&analysis, Some(algorithms), simulator).with_context(|| format!("{} model {model}", set.name))?);
            failed.extend(failed_here.into_iter().map(|row| (format!("{} model {model}: ", set.name), row)));
            for row in &rows {
                let speedup = single_us / row.graph_makespan_us;
                match summaries.iter_mut().find(|s| s.algorithm == row.algorithm) {
                    Some(summary) => summary.speedups.push(speedup),
                    None => summaries.push(Summary { algorithm: row.algorithm.clone(), speedups: vec![speedup] }),
                }
                simulated.insert((model.clone(), base_name(&row.algorithm).to_string()), row.graph_makespan_us);
            }
            per_graph.push(json!({"model": model, "single_us": single_us, "rows": rows}));
        }
        let (band, validated_on) = match set.validation {
            Validation::Measured(record) => {
                let measured = measured_latencies(&root.join(record))?;
                let errors: Vec<f64> = simulated.iter().filter_map(|(key, us)| measured.get(key).map(|m| (us - m) / m * 100.0)).collect();
                let runs = errors.len();
                (median_and_worst(&errors).map(|(median, _)| median), format!("{runs} measured runs in {record}"))
            }
            Validation::InGraph(dir) => {
                let errors = plan_errors(&root.join(dir))?;
                let graphs = errors.len();
                (median_and_worst(&errors).map(|(median, _)| median), format!("the plan's in-graph timings of {graphs} graphs with launch data in {dir}"))
            }
        };
        for s in &summaries {
            let (min, max) = s.speedups.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
            lines.push(format!(
                "{:<13} {:<18} {:>6} {:>11.3}× {:>8.3}× {:>8.3}× {:>8}",
                set.name,
                s.algorithm,
                s.speedups.len(),
                geomean(&s.speedups),
                min,
                max,
                band.map_or("-".to_string(), |b| format!("{b:.1}%"))
            ));
        }
        sets.push((set, summaries, band, validated_on, per_graph));
    }
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let names: Vec<String> = sets.first().map(|(_, s, ..)| s.iter().map(|x| x.algorithm.clone()).collect()).unwrap_or_default();
    let groups: Vec<Group> = sets
        .iter()
        .map(|(set, summaries, ..)| Group {
            label: format!("{} ({})", set.name, summaries.first().map_or(0, |s| s.speedups.len())),
            values: names.iter().map(|n| summaries.iter().find(|s| &s.algorithm == n).map_or(0.0, |s| geomean(&s.speedups))).collect(),
        })
        .collect();
    let bands: Vec<Vec<(f64, f64)>> = sets
        .iter()
        .zip(&groups)
        .map(|((_, _, band, ..), group)| group.values.iter().map(|&v| band.map_or((v, v), |b| (v * (1.0 - b / 100.0), v * (1.0 + b / 100.0)))).collect())
        .collect();
    let series: Vec<(&str, plotters::style::RGBColor)> = names.iter().enumerate().map(|(i, n)| (n.as_str(), PALETTE[i % PALETTE.len()])).collect();
    let notes: Vec<String> = sets.iter().map(|(set, _, band, validated_on, _)| format!("{}: band ±{} (the simulator's median |error| on {validated_on})", set.name, band.map_or("-".to_string(), |b| format!("{b:.1}%")))).collect();
    let svg = out_dir.join("study.svg");
    draw_grouped_with_bands(&svg, ("Stream-assignment policies, simulated: geometric-mean speedup over one stream", "simulated speedup over one stream (×)"), &groups, &series, &notes, &bands)?;
    let record = json!({
        "experiment": "study",
        "provenance": {
            "commit": experiments::record::build_commit(),
            "date_utc": experiments::record::now_utc(),
            "machine": "any (no GPU): the latencies are simulated",
        },
        "method": "every graph of each set assigned by each algorithm, the plan checked, its CUDA-graph launch simulated (each graph's own calibration); speedup over one stream, its geometric mean over the set; band: the simulator's median |error| on that kind of graph against measurements",
        "algorithms": algorithms,
        "sets": sets.iter().map(|(set, summaries, band, validated_on, per_graph)| json!({
            "name": set.name,
            "graphs_dir": set.graphs,
            "band_pct": band,
            "validated_on": validated_on,
            "summary": summaries.iter().map(|s| json!({"algorithm": s.algorithm, "graphs": s.speedups.len(), "geomean_speedup": geomean(&s.speedups)})).collect::<Vec<_>>(),
            "graphs": per_graph,
        })).collect::<Vec<_>>(),
        "failed": failed.iter().map(|(place, row)| json!({"where": place, "algorithm": row.algorithm, "error": row.error})).collect::<Vec<_>>(),
    });
    let record_path = out_dir.join("study.json");
    write_file(&record_path, &serde_json::to_string_pretty(&record)?)?;
    lines.extend(notes);
    lines.push(format!("record: {}\nfigure: {}", record_path.display(), svg.display()));
    emit(&lines.join("\n"))?;
    if failed.is_empty() { Ok(()) } else { Err(failed_rows_error(&failed)) }
}

