//! The paper's figures: one table of names and `figN` aliases, and the commands that measure
//! or re-render them.
//!
//! A figure command measures on the GPU when there is one and writes the record
//! (`paper-figs/results/<name>.json`) and the figure (`paper-figs/<name>.svg`). Without a GPU,
//! or with `--from-results`, it re-renders the figure from the committed record and says where
//! and when those numbers were measured.

use std::path::Path;

use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde_json::Value;

use crate::output::{emit, write_file};
use crate::torch::{self, InferArgs, Optimize};
use experiments::inference::InferMode;

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
        what: "GPU active time over wall time at batch 1, eager vs Nimble (the paper's Figure 2a)",
        pending: Some("kernel-time accounting on the GPU (issue 7)"),
    },
    Figure {
        name: "inference",
        aliases: &["fig5"],
        what: "inference speedup over tch eager at batch 1 for every zoo model: one-stream CUDA graph and Nimble (the paper's main inference comparison)",
        pending: None,
    },
    Figure { name: "training", aliases: &[], what: "training step speedup at batch 32/64/128 (the paper's training comparison)", pending: Some("training (issue 5)") },
    Figure {
        name: "multistream",
        aliases: &[],
        what: "per model: width, streams and syncs per algorithm, latency single vs multi-stream (the paper's multi-stream study)",
        pending: Some("the per-algorithm measurement (issue 7)"),
    },
    Figure { name: "algorithm-example", aliases: &[], what: "a small DAG through the algorithm's steps: graph, MEG, matching, chains, streams", pending: Some("issue 7") },
    Figure { name: "schedulers", aliases: &[], what: "every registered algorithm on every model, measured and simulated (beyond the paper)", pending: Some("issue 7") },
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

/// Options of the `inference` figure.
pub struct InferenceFigure<'a> {
    pub models: &'a str,
    pub batch: i64,
    pub warmup: usize,
    pub iterations: usize,
    /// Re-render from this record instead of measuring.
    pub from_results: bool,
    pub results: &'a Path,
    pub out_dir: &'a Path,
}

/// `inference` (`fig5`): measure (GPU) or re-render (no GPU), then draw.
pub fn inference(invoked_as: &str, args: &InferenceFigure<'_>) -> Result<()> {
    let figure = find("inference")?;
    eprintln!("{invoked_as}: {}", figure.what);
    if !args.from_results && nimble_torch::cuda_available() {
        eprintln!("measuring on this machine's GPU; the record goes to {}", args.results.display());
        torch::infer(&InferArgs {
            models: args.models,
            modes: &[InferMode::Eager, InferMode::Graph, InferMode::Nimble],
            batch: args.batch,
            algorithm: "nimble",
            optimize: Optimize::On,
            fuse_conv_relu: true,
            channels_last: None,
            warmup: args.warmup,
            iterations: args.iterations,
            weights: None,
            out: Some(args.results),
        })?;
    } else {
        let why = if args.from_results { "--from-results" } else { "no CUDA GPU here" };
        eprintln!("{why}: re-rendering from {}", args.results.display());
    }
    let text = std::fs::read_to_string(args.results).with_context(|| format!("reading {}", args.results.display()))?;
    let record: Value = serde_json::from_str(&text).with_context(|| format!("parsing {}", args.results.display()))?;
    let bars = speedups(&record).with_context(|| format!("reading the rows of {}", args.results.display()))?;
    let p = &record["provenance"];
    let measured = format!(
        "{} (driver {}, CUDA {}), libtorch {}, {}, commit {}",
        p["gpu"].as_str().unwrap_or("?"),
        p["driver_version"].as_str().unwrap_or("?"),
        p["driver_cuda_version"].as_str().unwrap_or("?"),
        record["libtorch"].as_str().unwrap_or("?"),
        p["date_utc"].as_str().unwrap_or("?"),
        p["commit"].as_str().map_or("?", |c| &c[..c.len().min(7)])
    );
    std::fs::create_dir_all(args.out_dir).with_context(|| format!("creating {}", args.out_dir.display()))?;
    let svg = args.out_dir.join(format!("{}.svg", figure.name));
    draw_speedups(&svg, &bars, &measured)?;
    let mut lines = vec![format!("measured: {measured}; median of {} after {} warm-ups", p["iterations"], p["warmup"])];
    lines.push(format!("{:<16} {:>10} {:>10} {:>10} {:>8}", "model", "eager ms", "graph x", "nimble x", "nimble/graph"));
    for bar in &bars {
        lines.push(format!("{:<16} {:>10.3} {:>10.2} {:>10.2} {:>8.2}", bar.model, bar.eager_ms, bar.graph, bar.nimble, bar.nimble / bar.graph));
    }
    lines.push(format!("figure: {}", svg.display()));
    emit(&lines.join("\n"))
}

/// One model's bars: speedups over eager.
struct Bars {
    model: String,
    eager_ms: f64,
    graph: f64,
    nimble: f64,
}

/// Speedups over eager of the rewritten one-stream graph and Nimble, per model, from an
/// `infer` record.
fn speedups(record: &Value) -> Result<Vec<Bars>> {
    let rows = record["rows"].as_array().context("no `rows` array")?;
    let median = |model: &str, mode: &str| -> Option<f64> {
        rows.iter()
            .find(|r| r["model"] == model && r["mode"] == mode && (mode == "eager" || r["optimized"] == true))
            .and_then(|r| r["latency"]["median_us"].as_f64())
    };
    let mut models: Vec<&str> = Vec::new();
    for row in rows {
        let model = row["model"].as_str().context("a row without `model`")?;
        if !models.contains(&model) {
            models.push(model);
        }
    }
    let mut bars = Vec::new();
    for model in models {
        match (median(model, "eager"), median(model, "graph"), median(model, "nimble")) {
            (Some(eager), Some(graph), Some(nimble)) => bars.push(Bars { model: model.to_string(), eager_ms: eager / 1000.0, graph: eager / graph, nimble: eager / nimble }),
            _ => eprintln!("{model}: the record lacks eager, graph or nimble (with the rewrites); left out"),
        }
    }
    if bars.is_empty() {
        bail!("no model has all of eager, graph and nimble");
    }
    Ok(bars)
}

/// A grouped bar chart of speedups over eager.
fn draw_speedups(path: &Path, bars: &[Bars], measured: &str) -> Result<()> {
    let top = bars.iter().map(|b| b.graph.max(b.nimble)).fold(1.0, f64::max) * 1.15;
    let n = bars.len() as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, notes) = root.split_vertically(500);
        let mut chart = ChartBuilder::on(&plot)
            .caption("Inference speedup over tch eager, batch 1", ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(40)
            .y_label_area_size(56)
            .build_cartesian_2d(0.0..n, 0.0..top)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len() * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.floor() as usize;
                if (x - i as f64 - 0.5).abs() < 1e-6 && i < bars.len() {
                    bars[i].model.clone()
                } else {
                    String::new()
                }
            })
            .y_desc("speedup over tch eager (×)")
            .draw()?;
        let series = [("one-stream CUDA graph", RGBColor(120, 144, 156), 0.12), ("Nimble (multi-stream)", RGBColor(25, 118, 210), 0.5)];
        for (k, (label, color, offset)) in series.into_iter().enumerate() {
            let value = |b: &Bars| if k == 0 { b.graph } else { b.nimble };
            let rects = bars.iter().enumerate().map(|(i, b)| Rectangle::new([(i as f64 + offset, 0.0), (i as f64 + offset + 0.36, value(b))], color.filled()));
            chart.draw_series(rects)?.label(label).legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        }
        chart.configure_series_labels().background_style(WHITE.mix(0.9)).border_style(BLACK).position(SeriesLabelPosition::UpperLeft).draw()?;
        let style = ("sans-serif", 13).into_font().color(&BLACK.mix(0.8));
        notes.draw(&Text::new(format!("Measured: {measured}. Both graphs with the inference rewrites."), (20, 10), style.clone()))?;
        notes.draw(&Text::new("Not shown: TensorRT and TVM (not on this machine); TorchScript and the PyTorch baselines (not yet measured).", (20, 32), style))?;
        root.present()?;
    }
    write_file(path, &svg)
}
