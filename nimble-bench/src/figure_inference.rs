//! The inference figure (`fig5`): Nimble's and the baselines' speedups over eager PyTorch, per
//! model, from the inference record and the Python baselines beside it.

use anyhow::{bail, Context, Result};
use plotters::prelude::*;
use serde_json::Value;

use crate::bars::{draw_grouped, Group};
use crate::figures::{find, measured_on, Measurement, PythonBaselines, Rendering};
use crate::output::emit;

/// `inference` (`fig5`): measure (GPU) or re-render (no GPU), then draw.
pub fn inference(invoked_as: &str, models: &str, batch: i64, args: &Rendering) -> Result<()> {
    let figure = find("inference")?;
    let record = args.record(invoked_as, figure, Measurement::Inference { models, batch })?;
    let bars = speedups(&record).with_context(|| format!("reading the rows of {}", args.results.display()))?;
    let p = &record["provenance"];
    let measured = measured_on(&record);
    let svg = args.svg(figure)?;
    let python = PythonBaselines::beside(&args.results, &["pytorch-baselines.json", "pytorch-compile.json"], "latency")?;
    // Every system, as speedup over tch eager per model (0 where not measured).
    let mut columns: Vec<(&str, RGBColor, Vec<f64>)> = Vec::new();
    for (system, label, color) in [("eager", "PyTorch eager", RGBColor(207, 216, 220)), ("torchscript", "PyTorch TorchScript", RGBColor(255, 224, 178))] {
        if python.has(system) {
            columns.push((label, color, bars.iter().map(|b| python.speedup(&b.model, 1, system, b.eager_ms * 1000.0)).collect()));
        }
    }
    if bars.iter().any(|b| b.torchscript.is_some()) {
        columns.push(("TorchScript (tch CModule)", RGBColor(255, 183, 77), bars.iter().map(|b| b.torchscript.unwrap_or(0.0)).collect()));
    }
    if python.has("compile") {
        columns.push(("torch.compile (reduce-overhead)", RGBColor(156, 39, 176), bars.iter().map(|b| python.speedup(&b.model, 1, "compile", b.eager_ms * 1000.0)).collect()));
    }
    columns.push(("one-stream CUDA graph", RGBColor(120, 144, 156), bars.iter().map(|b| b.graph).collect()));
    columns.push(("Nimble (multi-stream)", RGBColor(25, 118, 210), bars.iter().map(|b| b.nimble).collect()));
    let groups: Vec<Group> = bars.iter().enumerate().map(|(i, b)| Group { label: b.model.clone(), values: columns.iter().map(|c| c.2[i]).collect() }).collect();
    let series: Vec<(&str, RGBColor)> = columns.iter().map(|c| (c.0, c.1)).collect();
    let mut notes = vec![format!("Measured: {measured}. Both graphs with the inference rewrites.")];
    notes.push(match &python.provenance {
        Some(from) => format!("PyTorch bars: our Python runner in a separate process ({from}); missing bars: not measured there. Not shown: TensorRT, TVM."),
        None => "Not shown: TensorRT and TVM (not on this machine); the Python PyTorch baselines (no record beside this one).".to_string(),
    });
    draw_grouped(&svg, ("Inference speedup over tch eager, batch 1", "speedup over tch eager (×)"), &groups, &series, &notes)?;
    let mut lines = vec![format!("measured: {measured}; median of {} after {} warm-ups", p["iterations"], p["warmup"])];
    if let Some(from) = &python.provenance {
        lines.push(format!("PyTorch columns from {from}"));
    }
    let mut header = format!("{:<16} {:>9}", "model", "eager ms");
    for column in &columns {
        header += &format!(" {:>12}", short(column.0));
    }
    lines.push(header + "   (speedup over tch eager)");
    for (i, bar) in bars.iter().enumerate() {
        let mut line = format!("{:<16} {:>9.3}", bar.model, bar.eager_ms);
        for column in &columns {
            line += &if column.2[i] > 0.0 { format!(" {:>12.2}", column.2[i]) } else { format!(" {:>12}", "-") };
        }
        lines.push(line);
    }
    lines.push(format!("figure: {}", svg.display()));
    emit(&lines.join("\n"))
}

/// A column heading for a series label.
fn short(label: &str) -> &str {
    match label {
        "PyTorch eager" => "pt eager",
        "PyTorch TorchScript" => "pt script",
        "TorchScript (tch CModule)" => "tch script",
        "torch.compile (reduce-overhead)" => "compile",
        "one-stream CUDA graph" => "graph",
        "Nimble (multi-stream)" => "nimble",
        other => other,
    }
}

/// One model's bars: speedups over eager.
struct Bars {
    model: String,
    eager_ms: f64,
    /// TorchScript through tch's CModule, when the record has it.
    torchscript: Option<f64>,
    graph: f64,
    nimble: f64,
}

/// Speedups over eager of the rewritten one-stream graph and Nimble, per model, from an
/// `infer` record.
fn speedups(record: &Value) -> Result<Vec<Bars>> {
    let rows = record["rows"].as_array().context("no `rows` array")?;
    let median = |model: &str, mode: &str| -> Option<f64> {
        rows.iter()
            .find(|r| r["model"] == model && r["mode"] == mode && (mode == "eager" || mode.starts_with("torch") || r["optimized"] == true))
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
            (Some(eager), Some(graph), Some(nimble)) => bars.push(Bars {
                model: model.to_string(),
                eager_ms: eager / 1000.0,
                // Records of commit a192d49 spell the mode `torch-script`.
                torchscript: median(model, "torchscript").or_else(|| median(model, "torch-script")).map(|t| eager / t),
                graph: eager / graph,
                nimble: eager / nimble,
            }),
            _ => eprintln!("{model}: the record lacks eager, graph or nimble (with the rewrites); left out"),
        }
    }
    if bars.is_empty() {
        bail!("no model has all of eager, graph and nimble");
    }
    Ok(bars)
}
