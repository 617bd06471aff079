//! `scaling`: the data-parallel scaling figure and table, from the record `train --gpus` writes
//! and the PyTorch DDP record `experiments/python/ddp.py` writes in the same GPU session. Training
//! throughput (samples/s over all GPUs) per model and per-GPU batch, for each GPU count: Nimble's
//! whole step, DDP with the step captured by `torch.cuda.graph`, DDP eager. No GPU needed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use experiments::scaling::{self, ScalingRecord};
use serde::Deserialize;

use crate::bars::{draw_grouped, Group, PALETTE};

#[derive(Deserialize)]
struct DdpRecord {
    provenance: DdpProvenance,
    rows: Vec<DdpRow>,
}

#[derive(Deserialize)]
struct DdpProvenance {
    torch: String,
    commit: String,
}

#[derive(Deserialize)]
struct DdpRow {
    model: String,
    batch: i64,
    gpus: usize,
    system: String,
    samples_per_s: f64,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = nimble_graph::json::read_text(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not {what}", path.display()))
}

/// Prints the table and draws `<out_dir>/scaling.svg` from `results` (and `ddp` when given).
pub fn scaling(results: &Path, ddp: Option<&PathBuf>, out_dir: &Path) -> Result<()> {
    let record: ScalingRecord = read(results, "a scaling record (nimble-bench train --gpus --out)")?;
    if record.rows.is_empty() {
        bail!("{}: the record has no rows", results.display());
    }
    let ddp: Option<DdpRecord> = ddp.map(|p| read(p, "a DDP record (experiments/python/ddp.py --out)")).transpose()?;
    let ddp_at = |system: &str, model: &str, batch: i64, gpus: usize| {
        ddp.as_ref().and_then(|d| d.rows.iter().find(|r| r.system == system && r.model == model && r.batch == batch && r.gpus == gpus)).map(|r| r.samples_per_s)
    };
    let mut counts: Vec<usize> = record.rows.iter().map(|r| r.gpus).collect();
    counts.sort_unstable();
    counts.dedup();
    let mut configs: Vec<(String, i64)> = Vec::new();
    for row in &record.rows {
        if !configs.contains(&(row.model.clone(), row.batch)) {
            configs.push((row.model.clone(), row.batch));
        }
    }
    println!("{:<14} {:>5} {:>4} {:>12} {:>9} {:>12} {:>12} {:>13}   (samples/s over all GPUs)", "model", "batch", "GPUs", "nimble", "× 1 GPU", "ddp-graph", "ddp-eager", "nimble/graph");
    let mut groups = Vec::new();
    for (model, batch) in &configs {
        for &gpus in &counts {
            let Some(row) = record.rows.iter().find(|r| &r.model == model && r.batch == *batch && r.gpus == gpus) else { continue };
            let speedup = scaling::speedup(&record.rows, row).map_or("-".into(), |s| format!("{s:.2}"));
            let (graph, eager) = (ddp_at("ddp-graph", model, *batch, gpus), ddp_at("ddp-eager", model, *batch, gpus));
            let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0}"));
            let ratio = graph.map_or("-".to_string(), |g| format!("{:.2}", row.samples_per_s / g));
            println!("{model:<14} {batch:>5} {gpus:>4} {:>12.0} {speedup:>9} {:>12} {:>12} {ratio:>13}", row.samples_per_s, cell(graph), cell(eager));
            groups.push(Group { label: format!("{model} b{batch} ×{gpus}"), values: vec![row.samples_per_s / 1000.0, graph.unwrap_or(0.0) / 1000.0, eager.unwrap_or(0.0) / 1000.0] });
        }
    }
    let p = &record.provenance;
    let mut notes = vec![
        format!("Data parallel, one process per GPU, per-GPU batch b; {} (driver {}), NCCL {}, libtorch {}; commit {}.", p.gpu, p.driver_version.as_deref().unwrap_or("?"), record.nccl, record.libtorch, &p.commit[..p.commit.len().min(7)]),
        format!("Median of {} steps after {} warm-ups, CUDA events, no synchronization between steps; BatchNorm per rank.", p.iterations, p.warmup),
    ];
    if let Some(d) = &ddp {
        notes.push(format!("PyTorch DDP: torch {}, same machine and session (commit {}); eager is bound by its host.", d.provenance.torch, &d.provenance.commit[..d.provenance.commit.len().min(7)]));
    }
    let series = [("Nimble (whole step, NCCL in the graph)", PALETTE[0]), ("DDP + torch.cuda.graph", PALETTE[3]), ("DDP eager", PALETTE[2])];
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let svg = out_dir.join("scaling.svg");
    draw_grouped(&svg, ("Data-parallel training throughput", "thousand samples/s"), &groups, &series, &notes)?;
    println!("figure: {}", svg.display());
    Ok(())
}
