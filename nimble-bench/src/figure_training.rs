//! The training figure: each training mode's speedup over eager training, per model and batch,
//! from the training record.

use anyhow::{bail, Context, Result};
use plotters::prelude::*;

use crate::bars::{draw_grouped, Group};
use crate::figures::{find, measured_on, Measurement, PythonBaselines, Rendering};
use crate::output::emit;

/// `training`: measure (GPU) or re-render (no GPU), then draw.
pub fn training(invoked_as: &str, models: &str, batches: &[i64], args: &Rendering) -> Result<()> {
    let figure = find("training")?;
    let record = args.record(invoked_as, figure, Measurement::Training { models, batches })?;
    let rows = record["rows"].as_array().with_context(|| format!("{}: no `rows` array", args.results.display()))?;
    let median = |model: &str, batch: i64, mode: &str| {
        rows.iter().find(|r| r["model"] == model && r["batch"] == batch && r["mode"] == mode).and_then(|r| r["step"]["median_us"].as_f64())
    };
    let mut keys: Vec<(String, i64)> = Vec::new();
    for row in rows {
        let key = (row["model"].as_str().unwrap_or("?").to_string(), row["batch"].as_i64().unwrap_or(0));
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let modes = ["nimble", "nimble-fused", "graph", "step"];
    let python = PythonBaselines::beside(&args.results, &["pytorch-training.json"], "step")?;
    let python_systems: Vec<(&str, &str, RGBColor)> = [
        ("train-eager", "PyTorch eager (foreach SGD)", RGBColor(207, 216, 220)),
        ("train-graph", "PyTorch whole step, torch.cuda.graph", RGBColor(156, 39, 176)),
    ]
    .into_iter()
    .filter(|s| python.has(s.0))
    .collect();
    let mut groups = Vec::new();
    let mut lines = vec![format!("measured: {}; median of {} after {} warm-ups", measured_on(&record), record["provenance"]["iterations"], record["provenance"]["warmup"])];
    if let Some(from) = &python.provenance {
        lines.push(format!("PyTorch columns from {from}"));
    }
    let mut header = format!("{:<16} {:>5} {:>9}", "model", "batch", "eager ms");
    for system in &python_systems {
        header += &format!(" {:>12}", format!("{} x", system.0));
    }
    lines.push(header + &format!(" {:>9} {:>9} {:>9} {:>9}", "nimble x", "n-fused x", "graph x", "step x"));
    for (model, batch) in keys {
        let Some(eager) = median(&model, batch, "eager") else {
            eprintln!("{model} at batch {batch}: the record has no eager row; left out");
            continue;
        };
        let mut values: Vec<f64> = python_systems.iter().map(|s| python.speedup(&model, batch, s.0, eager)).collect();
        values.extend(modes.iter().map(|m| median(&model, batch, m).map_or(0.0, |t| eager / t)));
        let mut line = format!("{:<16} {:>5} {:>9.3}", model, batch, eager / 1000.0);
        for (i, v) in values.iter().enumerate() {
            let width = if i < python_systems.len() { 12 } else { 9 };
            line += &if *v > 0.0 { format!(" {v:>width$.2}") } else { format!(" {:>width$}", "-") };
        }
        lines.push(line);
        groups.push(Group { label: format!("{model} {batch}"), values });
    }
    if groups.is_empty() {
        bail!("{}: no model and batch size has an eager row to compare with", args.results.display());
    }
    let svg = args.svg(figure)?;
    let mut series: Vec<(&str, RGBColor)> = python_systems.iter().map(|s| (s.1, s.2)).collect();
    series.extend([
        ("Nimble autograd mode (forward + backward graphs), tch's SGD", RGBColor(187, 222, 251)),
        ("Nimble autograd mode, fused SGD", RGBColor(100, 181, 246)),
        ("whole step, one-stream CUDA graph", RGBColor(120, 144, 156)),
        ("whole step, Nimble's streams", RGBColor(25, 118, 210)),
    ]);
    let notes = [
        format!("Measured: {}. CIFAR-10 shapes, SGD with momentum; label: model and batch size.", measured_on(&record)),
        "Eager uses tch's SGD (a few kernels per parameter); the whole-step graphs and the fused autograd mode libtorch's fused SGD.".to_string(),
        match &python.provenance {
            Some(from) => format!("PyTorch bars: our Python runner in a separate process ({from}), as speedup over tch eager."),
            None => "Not shown: the Python PyTorch baselines (no pytorch-training.json beside this record).".to_string(),
        },
    ];
    draw_grouped(&svg, ("Training step speedup over tch eager", "speedup over tch eager (×)"), &groups, &series, &notes)?;
    lines.push(format!("figure: {}", svg.display()));
    emit(&lines.join("\n"))
}
