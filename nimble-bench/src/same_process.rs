//! `same-process`: the figure and table of the same-process comparison, rendered from the
//! records `experiments/python/same_process.py` writes on the GPU machine (PyTorch eager,
//! `torch.cuda.graph`, `torch.compile(mode="reduce-overhead")`, Nimble through the `nimble_rs`
//! package and, in records that have it, `torch.compile(backend="nimble")`, timed in one Python
//! process on the same module object). No GPU needed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

use crate::bars::{draw_grouped, Group, PALETTE};

#[derive(Deserialize)]
struct Record {
    provenance: Provenance,
    rows: Vec<Row>,
}

#[derive(Deserialize)]
struct Provenance {
    gpu: String,
    driver_version: Option<String>,
    torch: String,
    date_utc: String,
    commit: String,
}

#[derive(Deserialize)]
struct Row {
    model: String,
    system: String,
    #[serde(default = "float32")]
    dtype: String,
    #[serde(default = "one")]
    batch: u32,
    latency: Option<Latency>,
    relative_error: Option<f64>,
    error: Option<String>,
}

fn float32() -> String {
    "float32".into()
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
struct Latency {
    median_us: f64,
}

/// The systems after eager, each drawn as its speedup over eager; the backend's bars only where
/// a record has it.
const SYSTEMS: [&str; 4] = ["cuda-graph", "compile", "nimble", "backend"];
const SERIES: [(&str, usize); 4] = [("torch.cuda.graph", 2), ("torch.compile (reduce-overhead)", 3), ("Nimble (nimble_rs)", 0), ("torch.compile(backend=\"nimble\")", 1)];

/// Reads `records` (measured in parts, each model in one process), prints the table and draws
/// `<out_dir>/same-process.svg`.
pub fn same_process(records: &[PathBuf], out_dir: &Path) -> Result<()> {
    if records.is_empty() {
        bail!("no records given: expected --results FILE[,FILE…] from experiments/python/same_process.py");
    }
    let mut parsed = Vec::new();
    for path in records {
        let text = nimble_graph::json::read_text(path).with_context(|| format!("reading {}", path.display()))?;
        let record: Record = serde_json::from_str(&text).with_context(|| format!("{}: not a same-process record", path.display()))?;
        parsed.push((path, record));
    }
    let with_backend = parsed.iter().any(|(_, r)| r.rows.iter().any(|row| row.system == "backend"));
    let systems = if with_backend { &SYSTEMS[..] } else { &SYSTEMS[..3] };
    let mut models: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    let mut notes = Vec::new();
    let mut settings = Vec::new();
    let backend_header = if with_backend { format!(" {:>9} {:>15}", "backend", "backend/compile") } else { String::new() };
    println!("{:<16} {:>9} {:>11} {:>9} {:>9} {:>14}{backend_header}   (ms, median; nimble / compile)", "model", "eager", "cuda-graph", "compile", "nimble", "nimble/compile");
    for (path, record) in &parsed {
        let p = &record.provenance;
        let setting = record.rows.first().map_or("float32, batch 1".to_string(), |r| format!("{}, batch {}", r.dtype, r.batch));
        notes.push(format!("{}: {} (driver {}), torch {}, {}, commit {}, {setting}", path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()), p.gpu, p.driver_version.as_deref().unwrap_or("?"), p.torch, &p.date_utc[..p.date_utc.len().min(10)], &p.commit[..p.commit.len().min(7)]));
        settings.push(setting);
        let mut names: Vec<&str> = Vec::new();
        for row in &record.rows {
            if !names.contains(&row.model.as_str()) {
                names.push(&row.model);
            }
        }
        for name in names {
            let median = |system: &str| record.rows.iter().find(|r| r.model == name && r.system == system).and_then(|r| r.latency.as_ref()).map(|l| l.median_us / 1000.0);
            for row in record.rows.iter().filter(|r| r.model == name) {
                if let Some(error) = &row.error {
                    println!("{name}: {} failed: {error}", row.system);
                } else if row.relative_error.is_some_and(|e| e > 1e-2) {
                    println!("{name}: {} differs from eager by {:.1e}", row.system, row.relative_error.unwrap_or(f64::NAN));
                }
            }
            let cell = |v: Option<f64>| v.map_or(format!("{:>9}", "-"), |v| format!("{v:>9.3}"));
            let ratio = |system: &str| median(system).zip(median("compile")).map_or("-".to_string(), |(n, c)| format!("{:.2}", n / c));
            let backend = if with_backend { format!(" {} {:>15}", cell(median("backend")), ratio("backend")) } else { String::new() };
            println!("{name:<16} {} {:>11} {} {} {:>14}{backend}", cell(median("eager")), cell(median("cuda-graph")).trim_start(), cell(median("compile")), cell(median("nimble")), ratio("nimble"));
            let eager = median("eager");
            models.push((name.to_string(), systems.iter().map(|s| eager.zip(median(s)).map(|(e, v)| e / v)).collect()));
        }
    }
    let groups: Vec<Group> = models.iter().map(|(name, speedups)| Group { label: name.clone(), values: speedups.iter().map(|s| s.unwrap_or(0.0)).collect() }).collect();
    let series: Vec<(&str, _)> = SERIES[..systems.len()].iter().map(|&(label, colour)| (label, PALETTE[colour])).collect();
    settings.dedup();
    let setting = if settings.len() == 1 { settings[0].clone() } else { "batch and dtype per record (below)".to_string() };
    notes.insert(0, format!("One Python process per record, the same module object for every system; {setting}, cuDNN benchmark on, median of 100 after 50 warm-ups."));
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let svg = out_dir.join("same-process.svg");
    draw_grouped(&svg, ("Same process: speedup over PyTorch eager", "speedup over eager (×)"), &groups, &series, &notes)?;
    println!("figure: {}", svg.display());
    Ok(())
}
