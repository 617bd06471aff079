//! The paper's figures: one table of names and `figN` aliases, and the commands that measure
//! or re-render them.
//!
//! A figure command measures on the GPU when there is one and writes the record
//! (`paper-figs/results/<name>.json`) and the figure (`paper-figs/<name>.svg`). Without a GPU,
//! or with `--from-results`, it re-renders the figure from the committed record and says where
//! and when those numbers were measured.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use plotters::prelude::*;
use serde_json::Value;

use crate::bars::{draw_grouped, Group, PALETTE};
pub use crate::command_args::{Measurement, Rendering};
use crate::libtorch;
use crate::output::emit;

/// One figure or table of the evaluation.
pub struct Figure {
    /// The subcommand, named by content.
    pub name: &'static str,
    /// Aliases by the paper's numbering, where it is known.
    pub aliases: &'static [&'static str],
    /// What it shows, and what in the paper it corresponds to.
    pub what: &'static str,
    /// `None` when the command exists; otherwise what it waits for.
    pub pending: Option<&'static str>,
}

/// Every figure, in the paper's order. The one place that maps `figN` to a figure.
pub const FIGURES: &[Figure] = &[
    Figure {
        name: "overhead",
        aliases: &["fig2a"],
        what: "GPU busy time over wall time at batch 1 for every zoo model, tch eager and Nimble (the paper's Figure 2a, GPU active time over wall time)",
        pending: None,
    },
    Figure {
        name: "inference",
        aliases: &["fig5"],
        what: "inference speedup over tch eager at batch 1 for every zoo model: one-stream CUDA graph and Nimble (the paper's main inference comparison)",
        pending: None,
    },
    Figure {
        name: "training",
        aliases: &[],
        what: "training step speedup over tch eager at batch 32/64/128 on CIFAR-10: Nimble's autograd mode, whole step as a one-stream graph and on Nimble's streams (the paper's training comparison)",
        pending: None,
    },
    Figure {
        name: "multistream",
        aliases: &[],
        what: "per model: width, Nimble's streams and syncs, speedup of Nimble's streams over one stream, measured and simulated (the paper's multi-stream study)",
        pending: None,
    },
    Figure {
        name: "algorithm-example",
        aliases: &[],
        what: "a small DAG through the steps of Nimble's stream assignment: graph, MEG, bipartite matching, chains, streams and syncs",
        pending: None,
    },
    Figure {
        name: "coverage",
        aliases: &[],
        what: "every torchvision classifier and six transformers models, exported as TorchScript and run from the CLI: prepared or why not, speedup over eager and over one stream (beyond the paper)",
        pending: None,
    },
    Figure {
        name: "schedulers",
        aliases: &[],
        what: "every registered stream-assignment algorithm on every zoo model: speedup over one stream, measured and simulated (beyond the paper)",
        pending: None,
    },
];

/// Finds a figure by name or alias.
pub fn find(name: &str) -> Result<&'static Figure> {
    FIGURES.iter().find(|f| f.name == name || f.aliases.contains(&name)).with_context(|| {
        let names: Vec<String> = FIGURES.iter().map(|f| if f.aliases.is_empty() { f.name.to_string() } else { format!("{} ({})", f.name, f.aliases.join(", ")) }).collect();
        format!("unknown figure `{name}`; the figures are {}", names.join(", "))
    })
}

/// `figures`: the table.
pub fn list() -> Result<()> {
    let mut lines = vec![format!("{:<18} {:<7} {}", "figure", "alias", "what")];
    for f in FIGURES {
        let status = f.pending.map_or(String::new(), |p| format!(" [not yet: {p}]"));
        lines.push(format!("{:<18} {:<7} {}{status}", f.name, f.aliases.join(","), f.what));
    }
    emit(&lines.join("\n"))
}

impl Rendering {
    /// Says what `figure` shows; measures `what` (writing the record) when there is a GPU and
    /// libtorch and re-rendering was not asked for; then reads the record.
    pub(crate) fn record(&self, invoked_as: &str, figure: &Figure, what: Measurement<'_>) -> Result<Value> {
        eprintln!("{invoked_as}: {}", figure.what);
        match libtorch::can_measure() {
            Ok(()) if !self.from_results => {
                eprintln!("measuring on this machine's GPU; the record goes to {}", self.results.display());
                measure(&what, self)?;
            }
            why => {
                let why = if self.from_results { "--from-results" } else { why.err().unwrap_or_default() };
                eprintln!("{why}: re-rendering from {}", self.results.display());
            }
        }
        read_record(&self.results)
    }

    /// Where the figure's SVG goes (the directory is created).
    pub(crate) fn svg(&self, figure: &Figure) -> Result<PathBuf> {
        std::fs::create_dir_all(&self.out_dir).with_context(|| format!("creating {}", self.out_dir.display()))?;
        Ok(self.out_dir.join(format!("{}.svg", figure.name)))
    }
}


#[cfg(feature = "torch")]
fn measure(what: &Measurement<'_>, args: &Rendering) -> Result<()> {
    crate::torch_measure::measure_figure(what, args)
}

#[cfg(not(feature = "torch"))]
fn measure(_: &Measurement<'_>, _: &Rendering) -> Result<()> {
    Err(libtorch::missing("measuring a figure"))
}

/// The Python runner's records found beside one of ours, if any: inference
/// (`pytorch-baselines.json`, `pytorch-compile.json`) or training (`pytorch-training.json`).
pub(crate) struct PythonBaselines {
    /// (model, batch, system) → median µs.
    medians: Vec<(String, i64, String, f64)>,
    /// Where and when they were measured, in one line.
    pub(crate) provenance: Option<String>,
}

impl PythonBaselines {
    /// Reads the records `names` beside `results`; `timing` is the rows' field with the median
    /// (`latency` for inference, `step` for training).
    pub(crate) fn beside(results: &Path, names: &[&str], timing: &str) -> Result<PythonBaselines> {
        let mut medians = Vec::new();
        let (mut setup, mut dates) = (None, Vec::new());
        let dir = results.parent().unwrap_or(Path::new("."));
        for name in names {
            let path = dir.join(name);
            if !path.exists() {
                continue;
            }
            let record = read_record(&path)?;
            let p = &record["provenance"];
            setup.get_or_insert_with(|| format!("torch {}, {}", p["torch"].as_str().unwrap_or("?"), p["gpu"].as_str().unwrap_or("?")));
            // Each record has its own date: name them all.
            let what = name.trim_start_matches("pytorch-").trim_end_matches(".json");
            dates.push(format!("{what} {}", p["date_utc"].as_str().unwrap_or("?")));
            for row in record["rows"].as_array().with_context(|| format!("{}: no `rows` array", path.display()))? {
                if let (Some(model), Some(system), Some(median)) = (row["model"].as_str(), row["system"].as_str(), row[timing]["median_us"].as_f64()) {
                    // Inference rows carry no batch: the runner measures batch 1.
                    medians.push((model.to_string(), row["batch"].as_i64().unwrap_or(1), system.to_string(), median));
                }
            }
        }
        let provenance = setup.map(|setup| format!("{setup}; {}", dates.join(", ")));
        Ok(PythonBaselines { medians, provenance })
    }

    pub(crate) fn has(&self, system: &str) -> bool {
        self.medians.iter().any(|m| m.2 == system)
    }

    /// tch eager's time over the system's, or 0 when it was not measured.
    pub(crate) fn speedup(&self, model: &str, batch: i64, system: &str, eager_us: f64) -> f64 {
        self.medians.iter().find(|m| m.0 == model && m.1 == batch && m.2 == system).map_or(0.0, |m| eager_us / m.3)
    }
}

/// Reads a result record.
pub(crate) fn read_record(path: &Path) -> Result<Value> {
    let text = nimble_graph::json::read_text(path)?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// Where and when a record was measured, in one line.
pub(crate) fn measured_on(record: &Value) -> String {
    let p = &record["provenance"];
    format!(
        "{} (driver {}, CUDA {}), libtorch {}, {}, commit {}",
        p["gpu"].as_str().unwrap_or("?"),
        p["driver_version"].as_str().unwrap_or("?"),
        p["driver_cuda_version"].as_str().unwrap_or("?"),
        record["libtorch"].as_str().unwrap_or("?"),
        p["date_utc"].as_str().unwrap_or("?"),
        p["commit"].as_str().map_or("?", |c| &c[..c.len().min(7)])
    )
}

/// The schedulers record's data for one model, as the three figures drawn from it read it.
struct ModelRuns<'a> {
    name: &'a str,
    width: i64,
    eager_us: f64,
    eager_kernels_us: f64,
    rows: &'a [Value],
}

impl ModelRuns<'_> {
    fn row(&self, algorithm: &str) -> Option<&Value> {
        self.rows.iter().find(|r| r["algorithm"] == algorithm)
    }
    fn latency(&self, algorithm: &str) -> Option<f64> {
        self.row(algorithm).and_then(|r| r["latency"]["median_us"].as_f64())
    }
    fn simulated(&self, algorithm: &str) -> Option<f64> {
        self.row(algorithm).and_then(|r| r["simulated_us"].as_f64())
    }
}

fn model_runs(record: &Value) -> Result<Vec<ModelRuns<'_>>> {
    let models = record["models"].as_array().context("no `models` array")?;
    models
        .iter()
        .map(|m| {
            Ok(ModelRuns {
                name: m["model"].as_str().context("a model without `model`")?,
                width: m["width"].as_i64().unwrap_or(0),
                eager_us: m["eager"]["median_us"].as_f64().context("a model without an eager median")?,
                eager_kernels_us: m["eager_kernels_graph"]["median_us"].as_f64().unwrap_or(f64::NAN),
                rows: m["rows"].as_array().map(Vec::as_slice).unwrap_or(&[]),
            })
        })
        .collect()
}

/// The figures drawn from the schedulers record: `schedulers`, `multistream`, `overhead`.
pub fn from_schedulers_record(invoked_as: &str, name: &str, models: &str, kernel_graphs: Option<&Path>, args: &Rendering) -> Result<()> {
    let figure = find(name)?;
    let record = args.record(invoked_as, figure, Measurement::Schedulers { models, kernel_graphs })?;
    let runs = model_runs(&record).with_context(|| format!("reading {}", args.results.display()))?;
    let measured = measured_on(&record);
    let svg = args.svg(figure)?;
    let mut lines = vec![format!("measured: {measured}; median of {} after {} warm-ups", record["provenance"]["iterations"], record["provenance"]["warmup"])];
    match figure.name {
        "schedulers" => {
            let algorithms: Vec<String> = runs.first().map(|m| m.rows.iter().filter_map(|r| r["algorithm"].as_str().map(String::from)).collect()).unwrap_or_default();
            let mut header = format!("{:<16}", "model");
            for a in &algorithms {
                header += &format!(" {:>16}", a);
            }
            lines.push(header + "   (ms measured / simulated)");
            let mut groups = Vec::new();
            for m in &runs {
                let single = m.latency("single").context("the record lacks the `single` algorithm")?;
                let mut line = format!("{:<16}", m.name);
                for a in &algorithms {
                    line += &format!(" {:>16}", format!("{:.3}/{:.3}", m.latency(a).unwrap_or(f64::NAN) / 1000.0, m.simulated(a).unwrap_or(f64::NAN) / 1000.0));
                }
                lines.push(line);
                groups.push(Group { label: m.name.to_string(), values: algorithms.iter().map(|a| m.latency(a).map_or(0.0, |t| single / t)).collect() });
            }
            let series: Vec<(&str, RGBColor)> = algorithms.iter().enumerate().map(|(i, a)| (a.as_str(), PALETTE[i % PALETTE.len()])).collect();
            let notes = [format!("Measured: {measured}. Batch 1, inference rewrites on; speedup of each algorithm's graph over the one-stream graph.")];
            draw_grouped(&svg, ("Stream-assignment algorithms: speedup over one stream", "speedup over one stream (×)"), &groups, &series, &notes)?;
        }
        "multistream" => {
            lines.push(format!("{:<16} {:>6} {:>8} {:>6} {:>10} {:>10} {:>9} {:>9}", "model", "width", "streams", "syncs", "1 stream", "Nimble", "measured", "simulated"));
            let mut groups = Vec::new();
            for m in &runs {
                let (Some(single), Some(nimble)) = (m.latency("single"), m.latency("nimble")) else {
                    eprintln!("{}: the record lacks `single` or `nimble`; left out", m.name);
                    continue;
                };
                let row = m.row("nimble").expect("found above");
                let simulated = m.simulated("single").unwrap_or(f64::NAN) / m.simulated("nimble").unwrap_or(f64::NAN);
                lines.push(format!(
                    "{:<16} {:>6} {:>8} {:>6} {:>10.3} {:>10.3} {:>9.2} {:>9.2}",
                    m.name,
                    m.width,
                    row["streams"].as_i64().unwrap_or(-1),
                    row["syncs"].as_i64().unwrap_or(-1),
                    single / 1000.0,
                    nimble / 1000.0,
                    single / nimble,
                    simulated
                ));
                groups.push(Group { label: format!("{} (w{})", m.name, m.width), values: vec![single / nimble, simulated] });
            }
            let series = [("measured", RGBColor(25, 118, 210)), ("simulated", RGBColor(187, 222, 251))];
            let notes = [format!("Measured: {measured}. Batch 1, inference rewrites on; w: the task graph's width (maximum logical concurrency).")];
            draw_grouped(&svg, ("Nimble's streams: speedup over one stream", "speedup over one stream (×)"), &groups, &series, &notes)?;
        }
        _ => {
            lines.push(format!("{:<16} {:>10} {:>10} {:>10}", "model", "eager ms", "busy ms", "eager busy"));
            lines.push("   Nimble: one-stream time of its kernels / its latency (above 1: streams overlap)".to_string());
            let mut groups = Vec::new();
            for m in &runs {
                let overlap = match (m.latency("single"), m.latency("nimble")) {
                    (Some(single), Some(nimble)) => single / nimble,
                    _ => 0.0,
                };
                let busy = m.eager_kernels_us / m.eager_us;
                lines.push(format!("{:<16} {:>10.3} {:>10.3} {:>10.2}   Nimble {:.2}", m.name, m.eager_us / 1000.0, m.eager_kernels_us / 1000.0, busy, overlap));
                groups.push(Group { label: m.name.to_string(), values: vec![busy, overlap] });
            }
            let series = [("tch eager: GPU busy / wall time", RGBColor(120, 144, 156)), ("Nimble: one-stream time of its kernels / wall time", RGBColor(25, 118, 210))];
            let notes = [
                format!("Measured: {measured}. Batch 1. GPU busy time of eager: its own kernels replayed back to back as a one-stream CUDA graph."),
                "Nimble runs the rewritten forward; it has no host gaps, and above 1 its streams overlap kernels.".to_string(),
            ];
            draw_grouped(&svg, ("How busy the GPU is (the paper's Figure 2a)", "time ratio"), &groups, &series, &notes)?;
        }
    }
    lines.push(format!("figure: {}", svg.display()));
    emit(&lines.join("\n"))
}
