//! `training-backend`: the table and figure of a full SGD step through
//! `torch.compile(backend="nimble")` against `torch.compile(mode="reduce-overhead")` and eager,
//! rendered from the records `experiments/python/training_backend.py` writes on the GPU machine
//! (one Python process, each system on its own copy of the same weights). No GPU needed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::bars::{draw_grouped, Group, PALETTE};
use crate::same_process::{round_ratio_range, Latency, Provenance};

#[derive(Deserialize)]
struct Record {
    experiment: String,
    provenance: Provenance,
    rows: Vec<Row>,
}

#[derive(Deserialize)]
struct Row {
    model: String,
    batch: u32,
    system: String,
    step: Option<Latency>,
    prepare_seconds: Option<f64>,
    grad_error: Option<f64>,
    error: Option<String>,
}

/// The systems after eager, each drawn as its step's speedup over eager's.
const SERIES: [(&str, &str, usize); 2] = [("compile", "torch.compile (reduce-overhead)", 3), ("backend", "torch.compile(backend=\"nimble\")", 1)];

/// Reads `records`, prints the table and draws `<out_dir>/training-backend.svg`.
pub fn training_backend(records: &[PathBuf], out_dir: &Path) -> Result<()> {
    if records.is_empty() {
        bail!("no records given: expected --results FILE[,FILE…] from experiments/python/training_backend.py");
    }
    let (mut groups, mut notes) = (Vec::new(), Vec::new());
    println!("{:<14} {:>5} {:>9} {:>9} {:>9} {:>15} {:>10} {:>13} {:>21}   (step ms, median)", "model", "batch", "eager", "compile", "backend", "backend/compile", "by round", "prepare c/b s", "grad error c/b");
    for path in records {
        let text = nimble_graph::json::read_text(path).with_context(|| format!("reading {}", path.display()))?;
        let record: Record = serde_json::from_str(&text).with_context(|| format!("{}: not a training-backend record", path.display()))?;
        if record.experiment != "training-backend" {
            bail!("{}: a {} record, expected training-backend (experiments/python/training_backend.py)", path.display(), record.experiment);
        }
        notes.push(record.provenance.note(path, "float32, SGD step"));
        let mut cells: Vec<(&str, u32)> = Vec::new();
        for row in &record.rows {
            if !cells.contains(&(row.model.as_str(), row.batch)) {
                cells.push((&row.model, row.batch));
            }
        }
        for (model, batch) in cells {
            let row = |system: &str| record.rows.iter().find(|r| r.model == model && r.batch == batch && r.system == system);
            let step = |system: &str| row(system).and_then(|r| r.step.as_ref()).map(|s| s.median_us / 1000.0);
            for failed in record.rows.iter().filter(|r| r.model == model && r.batch == batch && r.error.is_some()) {
                println!("{model} b{batch}: {} failed: {}", failed.system, failed.error.as_deref().unwrap_or_default());
            }
            let ms = |system: &str| step(system).map_or(format!("{:>9}", "-"), |v| format!("{v:>9.3}"));
            let prepare = |system: &str| row(system).and_then(|r| r.prepare_seconds).map_or("-".to_string(), |v| format!("{v:.1}"));
            let grad = |system: &str| row(system).and_then(|r| r.grad_error).map_or("-".to_string(), |v| format!("{v:.1e}"));
            let ratio = step("backend").zip(step("compile")).map_or("-".to_string(), |(b, c)| format!("{:.2}", b / c));
            let latency = |system: &str| row(system).and_then(|r| r.step.as_ref());
            let by_round = latency("backend").zip(latency("compile")).map_or("-".to_string(), |(b, c)| round_ratio_range(b, c));
            println!("{model:<14} {batch:>5} {} {} {} {ratio:>15} {by_round:>10} {:>13} {:>21}", ms("eager"), ms("compile"), ms("backend"), format!("{}/{}", prepare("compile"), prepare("backend")), format!("{}/{}", grad("compile"), grad("backend")));
            let eager = step("eager");
            groups.push(Group { label: format!("{model} b{batch}"), values: SERIES.iter().map(|(system, _, _)| eager.zip(step(system)).map_or(0.0, |(e, v)| e / v)).collect() });
        }
    }
    notes.insert(0, "One Python process per record, each system on its own copy of the same weights; the step's median of 100 after 50 warm-ups.".to_string());
    let series: Vec<(&str, _)> = SERIES.iter().map(|&(_, label, colour)| (label, PALETTE[colour])).collect();
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let svg = out_dir.join("training-backend.svg");
    draw_grouped(&svg, ("Training step through the backend: speedup over PyTorch eager", "speedup over eager (×)"), &groups, &series, &notes)?;
    println!("figure: {}", svg.display());
    Ok(())
}
