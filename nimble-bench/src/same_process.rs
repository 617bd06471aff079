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
pub(crate) struct Provenance {
    gpu: String,
    driver_version: Option<String>,
    torch: String,
    date_utc: String,
    commit: String,
}

impl Provenance {
    /// "FILE: GPU (driver D), torch T, DATE, commit C, SETTING": a figure's note for one record.
    pub(crate) fn note(&self, path: &Path, setting: &str) -> String {
        let file = path.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
        let (date, commit) = (&self.date_utc[..self.date_utc.len().min(10)], &self.commit[..self.commit.len().min(7)]);
        format!("{file}: {} (driver {}), torch {}, {date}, commit {commit}, {setting}", self.gpu, self.driver_version.as_deref().unwrap_or("?"), self.torch)
    }
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
    /// Eager's own relative difference with TF32 off (float32 records from 36225d0 on): what
    /// rounding alone moves this model's output by.
    eager_tf32_drift: Option<f64>,
    error: Option<String>,
    /// Seconds from the module to its first timed call (compiles, warm-ups, captures).
    prepare_seconds: Option<f64>,
    /// The most memory allocated during preparation and three calls, above what was allocated
    /// before (negative where an earlier model's memory was freed meanwhile).
    peak_bytes: Option<f64>,
}

fn float32() -> String {
    "float32".into()
}

fn one() -> u32 {
    1
}

#[derive(Deserialize)]
pub(crate) struct Latency {
    pub(crate) median_us: f64,
    /// Each timing round's median, in records whose systems were timed in rounds (every system
    /// in each round): their spread is the run's noise.
    #[serde(default)]
    round_medians_us: Vec<f64>,
}

/// "lo–hi": the lowest and highest of `system`'s latency over `base`'s, round by round (rounds
/// timed both), or "-" for records without rounds.
pub(crate) fn round_ratio_range(system: &Latency, base: &Latency) -> String {
    let ratios: Vec<f64> = system.round_medians_us.iter().zip(&base.round_medians_us).filter(|(_, b)| **b > 0.0).map(|(s, b)| s / b).collect();
    let low = ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let high = ratios.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if ratios.is_empty() {
        "-".to_string()
    } else {
        format!("{low:.2}–{high:.2}")
    }
}

/// The systems after eager, each drawn as its speedup over eager; the backend's bars only where
/// a record has it.
const SYSTEMS: [&str; 4] = ["cuda-graph", "compile", "nimble", "backend"];
const SERIES: [(&str, usize); 4] = [("torch.cuda.graph", 2), ("torch.compile (reduce-overhead)", 3), ("Nimble (nimble_rs)", 0), ("torch.compile(backend=\"nimble\")", 1)];

/// "DTYPE, batch N" of a record (its first row's; a record is measured at one setting).
fn setting_of(record: &Record) -> String {
    record.rows.first().map_or("float32, batch 1".to_string(), |r| format!("{}, batch {}", r.dtype, r.batch))
}

/// The largest max-abs relative error from eager that still counts as a match, as
/// `experiments/python/same_process.py` sets it: float32 reassociation (TF32 convolutions
/// included), or a few units of the last place in half precision.
fn tolerance(dtype: &str) -> f64 {
    if dtype == "float32" {
        1e-2
    } else {
        5e-2
    }
}

/// "  prepare and peak: SYSTEM S s (R× compile's), M MiB; …" for one model's rows that have
/// them (records from 2026-11 on), eager left out; None where none has.
fn costs<'a>(rows: impl Iterator<Item = &'a Row> + Clone) -> Option<String> {
    let compile = rows.clone().find(|r| r.system == "compile").and_then(|r| r.prepare_seconds);
    let parts: Vec<String> = rows
        .filter(|r| r.system != "eager" && (r.prepare_seconds.is_some() || r.peak_bytes.is_some()))
        .map(|r| {
            let seconds = r.prepare_seconds.map_or("- s".to_string(), |s| match compile.filter(|c| *c > 0.0 && r.system != "compile") {
                Some(c) => format!("{s:.1} s ({:.2}x compile's)", s / c),
                None => format!("{s:.1} s"),
            });
            let peak = r.peak_bytes.map_or("- MiB".to_string(), |b| format!("{:.0} MiB", b / 1_048_576.0));
            format!("{} {seconds}, {peak}", r.system)
        })
        .collect();
    (!parts.is_empty()).then(|| format!("  prepare and peak: {}", parts.join("; ")))
}

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
    // Records of several settings (dtype, batch): each model's row says which it is.
    let mut all_settings: Vec<String> = parsed.iter().map(|(_, r)| setting_of(r)).collect();
    all_settings.dedup();
    let label_settings = all_settings.len() > 1;
    let backend_header = if with_backend { format!(" {:>9} {:>15} {:>10}", "backend", "backend/compile", "by round") } else { String::new() };
    println!("{:<16} {:>9} {:>11} {:>9} {:>9} {:>14}{backend_header}   (ms, median; nimble / compile)", "model", "eager", "cuda-graph", "compile", "nimble", "nimble/compile");
    for (path, record) in &parsed {
        let p = &record.provenance;
        let setting = setting_of(record);
        notes.push(p.note(path, &setting));
        settings.push(setting);
        let mut names: Vec<&str> = Vec::new();
        for row in &record.rows {
            if !names.contains(&row.model.as_str()) {
                names.push(&row.model);
            }
        }
        for name in names {
            let tolerance = record.rows.iter().find(|r| r.model == name).map_or(1e-2, |r| tolerance(&r.dtype));
            let label = match record.rows.iter().find(|r| r.model == name) {
                Some(r) if label_settings => format!("{name} ({}, b{})", r.dtype, r.batch),
                _ => name.to_string(),
            };
            let latency = |system: &str| record.rows.iter().find(|r| r.model == name && r.system == system).and_then(|r| r.latency.as_ref());
            let median = |system: &str| latency(system).map(|l| l.median_us / 1000.0);
            for row in record.rows.iter().filter(|r| r.model == name) {
                if let Some(error) = &row.error {
                    println!("{label}: {} failed: {error}", row.system);
                } else if let Some(e) = row.relative_error.filter(|&e| e > tolerance) {
                    match row.eager_tf32_drift {
                        Some(drift) if e <= drift => println!("{label}: {} differs from eager by {e:.1e}, within eager's own drift with TF32 off ({drift:.1e}; tolerance {tolerance:.0e})", row.system),
                        Some(drift) => println!("{label}: {} differs from eager by {e:.1e} (tolerance {tolerance:.0e}; eager's own drift with TF32 off {drift:.1e})", row.system),
                        None => println!("{label}: {} differs from eager by {e:.1e} (tolerance {tolerance:.0e})", row.system),
                    }
                }
            }
            let cell = |v: Option<f64>| v.map_or(format!("{:>9}", "-"), |v| format!("{v:>9.3}"));
            let ratio = |system: &str| median(system).zip(median("compile")).map_or("-".to_string(), |(n, c)| format!("{:.2}", n / c));
            let by_round = latency("backend").zip(latency("compile")).map_or("-".to_string(), |(b, c)| round_ratio_range(b, c));
            let backend = if with_backend { format!(" {} {:>15} {by_round:>10}", cell(median("backend")), ratio("backend")) } else { String::new() };
            println!("{label:<16} {} {:>11} {} {} {:>14}{backend}", cell(median("eager")), cell(median("cuda-graph")).trim_start(), cell(median("compile")), cell(median("nimble")), ratio("nimble"));
            // The backend with other options, or reduce-overhead with other Inductor settings,
            // timed beside them (`--backend-variant`, `--compile-variant NAME=JSON`): a line
            // each, "system  ms  over compile  by round".
            for row in record.rows.iter().filter(|r| r.model == name && (r.system.starts_with("backend-") || r.system.starts_with("compile-"))) {
                let by_round = latency(&row.system).zip(latency("compile")).map_or("-".to_string(), |(b, c)| round_ratio_range(b, c));
                println!("  {:<14} {:>9} {:>11} {:>9} {:>9} {:>14} {} {:>15} {by_round:>10}", row.system, "", "", "", "", "", cell(median(&row.system)), ratio(&row.system));
            }
            if let Some(line) = costs(record.rows.iter().filter(|r| r.model == name)) {
                println!("{line}");
            }
            let eager = median("eager");
            models.push((label, systems.iter().map(|s| eager.zip(median(s)).map(|(e, v)| e / v)).collect()));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn latency(rounds: &[f64]) -> Latency {
        Latency { median_us: 0.0, round_medians_us: rounds.to_vec() }
    }

    #[test]
    fn round_ratios_pair_rounds_and_span_lowest_to_highest() {
        let cases: [(&[f64], &[f64], &str); 3] = [
            (&[90.0, 110.0, 100.0], &[100.0, 100.0, 125.0], "0.80–1.10"),
            (&[90.0], &[], "-"),
            (&[], &[], "-"),
        ];
        for (system, base, expected) in cases {
            assert_eq!(round_ratio_range(&latency(system), &latency(base)), expected, "{system:?} over {base:?}");
        }
    }
}
