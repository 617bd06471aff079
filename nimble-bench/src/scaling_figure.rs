//! `scaling`: the data-parallel scaling figure and table, from the record `train --gpus` writes
//! and the PyTorch DDP record `experiments/python/ddp.py` writes in the same GPU session. Training
//! throughput (samples/s over all GPUs) per model and per-GPU batch, for each GPU count: Nimble's
//! whole step, DDP with the step captured by `torch.cuda.graph`, DDP eager. With the forward
//! graphs `train --gpus --graphs` wrote and an all-reduce record, also the simulator's projection
//! (`experiments::scaling_model`): its 2-GPU prediction beside the measurement, and 4 and 8 GPUs,
//! marked as simulated. No GPU needed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use experiments::scaling::{self, AllReduceRecord, ScalingRecord};
use experiments::scaling_model::{project, Projection, ProjectionOptions};
use nimble_graph::TaskGraph;
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
    /// None in a system's failed row (`failed`: what it raised).
    samples_per_s: Option<f64>,
}

fn read<T: serde::de::DeserializeOwned>(path: &Path, what: &str) -> Result<T> {
    let text = nimble_graph::json::read_text(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{}: not {what}", path.display()))
}

/// Where the forward task graph of `model` at per-GPU `batch` is under `dir`.
pub fn graph_path(dir: &Path, model: &str, batch: i64) -> PathBuf {
    dir.join(format!("{model}-b{batch}.json"))
}

/// What the projection is made from.
pub struct Simulated<'a> {
    /// The forward graphs (`train --gpus --graphs DIR`).
    pub graphs: &'a Path,
    /// The all-reduce record whose ring model prices the collectives.
    pub allreduce: &'a Path,
    pub algorithm: &'a str,
    /// GPU counts projected besides the measured ones.
    pub gpus: &'a [usize],
    pub backward_factor: f64,
    /// How much slower compute runs beside an all-reduce (1: not at all).
    pub collective_slowdown: f64,
    /// Parameter bytes the optimizer updates per µs (0: free).
    pub optimizer_bytes_per_us: f64,
}

/// The projection to each of `counts` GPUs of every configuration the record measured on one GPU.
pub fn projections(record: &ScalingRecord, sim: &Simulated<'_>, counts: &[usize]) -> Result<Vec<(String, Projection)>> {
    let allreduce: AllReduceRecord = read(sim.allreduce, "an all-reduce record (nimble-bench allreduce --out)")?;
    let options = ProjectionOptions {
        buckets: (record.first_bucket_bytes, record.bucket_bytes),
        backward_factor: sim.backward_factor,
        all_reduce: allreduce.model,
        collective_slowdown: sim.collective_slowdown,
        optimizer_bytes_per_us: sim.optimizer_bytes_per_us,
    };
    let mut out = Vec::new();
    for row in record.rows.iter().filter(|r| r.gpus == 1) {
        let path = graph_path(sim.graphs, &row.model, row.batch);
        let text = nimble_graph::json::read_text(&path).with_context(|| format!("reading the forward graph of {} at batch {}", row.model, row.batch))?;
        let forward = TaskGraph::from_json_str(&text).with_context(|| format!("{}: not a task graph", path.display()))?;
        let p = project(&forward, row.batch, row.step.median_us, counts, sim.algorithm, &options).map_err(anyhow::Error::msg).with_context(|| format!("projecting {} at batch {}", row.model, row.batch))?;
        out.push((row.model.clone(), p));
    }
    Ok(out)
}

/// Prints the table and draws `<out_dir>/scaling.svg` from `results` (and `ddp` when given).
pub fn scaling(results: &Path, ddp: Option<&PathBuf>, simulated: Option<&Simulated<'_>>, out_dir: &Path) -> Result<()> {
    let record: ScalingRecord = read(results, "a scaling record (nimble-bench train --gpus --out)")?;
    if record.rows.is_empty() {
        bail!("{}: the record has no rows", results.display());
    }
    let mut counts: Vec<usize> = record.rows.iter().map(|r| r.gpus).chain(simulated.map_or(&[][..], |s| s.gpus).iter().copied()).collect();
    counts.sort_unstable();
    counts.dedup();
    let projected = simulated.map(|sim| projections(&record, sim, &counts)).transpose()?.unwrap_or_default();
    let simulated_at = |model: &str, batch: i64, gpus: usize| projected.iter().find(|(m, p)| m == model && p.batch == batch).and_then(|(_, p)| p.at(gpus));
    let ddp: Option<DdpRecord> = ddp.map(|p| read(p, "a DDP record (experiments/python/ddp.py --out)")).transpose()?;
    let ddp_at = |system: &str, model: &str, batch: i64, gpus: usize| {
        ddp.as_ref().and_then(|d| d.rows.iter().find(|r| r.system == system && r.model == model && r.batch == batch && r.gpus == gpus)).and_then(|r| r.samples_per_s)
    };
    let mut configs: Vec<(String, i64)> = Vec::new();
    for row in &record.rows {
        if !configs.contains(&(row.model.clone(), row.batch)) {
            configs.push((row.model.clone(), row.batch));
        }
    }
    println!(
        "{:<14} {:>5} {:>4} {:>10} {:>8} {:>10} {:>8} {:>7} {:>10} {:>10} {:>8}   (samples/s over all GPUs; sim: the simulator's projection)",
        "model", "batch", "GPUs", "nimble", "× 1 GPU", "sim", "sim × 1", "sim err", "ddp-graph", "ddp-eager", "/graph"
    );
    let cell = |v: Option<f64>, digits: usize| v.map_or("-".to_string(), |v| format!("{v:.digits$}"));
    let mut groups = Vec::new();
    for (model, batch) in &configs {
        let one = record.rows.iter().find(|r| &r.model == model && r.batch == *batch && r.gpus == 1);
        for &gpus in &counts {
            let row = record.rows.iter().find(|r| &r.model == model && r.batch == *batch && r.gpus == gpus);
            let sim = simulated_at(model, *batch, gpus).filter(|_| gpus > 1);
            if row.is_none() && sim.is_none() {
                continue;
            }
            let measured = row.map(|r| r.samples_per_s);
            let speedup = row.and_then(|r| scaling::speedup(&record.rows, r));
            let sim_speedup = sim.zip(one).map(|(s, o)| s.samples_per_s / o.samples_per_s);
            let error = sim.zip(measured).map(|(s, m)| 100.0 * (s.samples_per_s / m - 1.0));
            let (graph, eager) = (ddp_at("ddp-graph", model, *batch, gpus), ddp_at("ddp-eager", model, *batch, gpus));
            let ratio = measured.zip(graph).map(|(m, g)| m / g);
            println!(
                "{model:<14} {batch:>5} {gpus:>4} {:>10} {:>8} {:>10} {:>8} {:>7} {:>10} {:>10} {:>8}",
                cell(measured, 0),
                cell(speedup, 2),
                cell(sim.map(|s| s.samples_per_s), 0),
                cell(sim_speedup, 2),
                error.map_or("-".into(), |e| format!("{e:+.1}%")),
                cell(graph, 0),
                cell(eager, 0),
                cell(ratio, 2)
            );
            let thousands = |v: Option<f64>| v.unwrap_or(0.0) / 1000.0 / gpus as f64;
            let label = if row.is_some() { format!("{model} b{batch} ×{gpus}") } else { format!("{model} b{batch} ×{gpus} (sim)") };
            groups.push(Group { label, values: vec![thousands(measured), thousands(sim.map(|s| s.samples_per_s)), thousands(graph), thousands(eager)] });
        }
    }
    let p = &record.provenance;
    let mut notes = vec![
        format!("Data parallel, one process per GPU, per-GPU batch b; {} (driver {}), NCCL {}, libtorch {}; commit {}.", p.gpu, p.driver_version.as_deref().unwrap_or("?"), record.nccl, record.libtorch, &p.commit[..p.commit.len().min(7)]),
        format!("Median of {} steps after {} warm-ups, CUDA events, no synchronization between steps; BatchNorm per rank.", p.iterations, p.warmup),
    ];
    if let Some(d) = &ddp {
        let short = |c: &str| c.chars().take(7).collect::<String>();
        if short(&d.provenance.commit) != short(&p.commit) {
            eprintln!("note: the DDP record was measured at commit {}, the scaling record at {}: compare systems only within one session", short(&d.provenance.commit), short(&p.commit));
        }
        notes.push(format!("PyTorch DDP: torch {}, same machine and session; eager is bound by its host.", d.provenance.torch));
    }
    if let (Some(sim), Some((_, first))) = (simulated, projected.first()) {
        notes.push(format!(
            "Simulated: step graph (backward {}× forward), {} plan, compute calibrated to 1 GPU, all-reduce ring model ({}); no contention.",
            sim.backward_factor,
            first.algorithm,
            sim.allreduce.file_name().map_or("?".into(), |f| f.to_string_lossy().into_owned())
        ));
    }
    let series = [("Nimble (whole step, NCCL in the graph)", PALETTE[0]), ("Nimble, simulated", PALETTE[1]), ("DDP + torch.cuda.graph", PALETTE[3]), ("DDP eager", PALETTE[2])];
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let svg = out_dir.join("scaling.svg");
    draw_grouped(&svg, ("Data-parallel training throughput per GPU (flat = perfect scaling)", "thousand samples/s per GPU"), &groups, &series, &notes)?;
    println!("figure: {}", svg.display());
    Ok(())
}
