//! `coverage DIR`'s measuring: every model of the exporter's manifest in a child `nimble-bench
//! infer --torchscript` process with a time limit, each outcome classified, the record rewritten
//! after every model. Needs the `torch` feature (the children run models).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use experiments::coverage::{CoverageRecord, Manifest, ManifestEntry, ModelOutcome, Part, Status};
use experiments::inference::LIBTORCH_VERSION;
use experiments::record::Provenance;

use crate::command_args::CoverageArgs;
use crate::output::write_file;

/// Runs every selected model of `dir`'s manifest, writing the record after each one, so that a
/// run cut short leaves the models measured so far.
pub(crate) fn measure(dir: &Path, args: &CoverageArgs<'_>) -> Result<CoverageRecord> {
    anyhow::ensure!(args.iterations >= 1, "--iters must be at least 1");
    anyhow::ensure!(!args.timeout.is_zero(), "--timeout must be at least 1 second");
    let manifest = Manifest::read(&dir.join("manifest.json")).map_err(anyhow::Error::msg)?;
    let entries = manifest.select(args.only).map_err(anyhow::Error::msg)?;
    let gpu = crate::torch::open_gpu("coverage", " (without DIR, coverage re-renders the committed record)")?;
    let scratch = std::env::temp_dir().join(format!("nimble-coverage-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let exporter = serde_json::json!({ "torch": manifest.torch, "versions": manifest.versions, "device": manifest.device, "batch": manifest.batch });
    let method = "each model in its own process: nimble-bench infer --torchscript FILE --input ... --mode eager,graph,nimble --optimize both --exact-check (cuDNN benchmark on; fresh random inputs; \
                  every graph checked against the module's eager forward on a fresh input in exact float32, then prepared again with libtorch's defaults (TF32 convolutions) and timed; CUDA events; two mirrored blocks per system; median)";
    // Stamped whenever the record is written: the date is when its last model finished.
    let part = || Part {
        provenance: Provenance::now(gpu.info(), args.warmup, args.iterations, method),
        libtorch: LIBTORCH_VERSION.into(),
        precision: crate::torch::PRECISION.into(),
        exporter: exporter.clone(),
        timeout_s: args.timeout.as_secs_f64(),
    };
    let mut outcomes = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let outcome = match &entry.error {
            Some(error) => ModelOutcome::failed(entry, 0, Status::Export, error.clone(), 0.0),
            None => run_model(dir, entry, args, &scratch),
        };
        eprintln!("[{}/{}] {}", index + 1, entries.len(), progress_line(&outcome));
        outcomes.push(outcome);
        let record = CoverageRecord::new(part(), outcomes.clone());
        write_file(args.results, &serde_json::to_string_pretty(&record)?)?;
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(CoverageRecord::new(part(), outcomes))
}

/// One model in a child `infer` process, killed after `args.timeout`.
fn run_model(dir: &Path, entry: &ManifestEntry, args: &CoverageArgs<'_>, scratch: &Path) -> ModelOutcome {
    let started = Instant::now();
    let out = scratch.join(format!("{}.json", entry.name));
    let log = scratch.join(format!("{}.log", entry.name));
    let failed = |status: Status, error: String| ModelOutcome::failed(entry, 0, status, error, started.elapsed().as_secs_f64());
    let spawned = (|| -> Result<std::process::Child> {
        let stderr = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new(std::env::current_exe().context("finding nimble-bench's own executable")?);
        command.args(["infer", "--torchscript"]).arg(dir.join(&entry.file));
        for input in &entry.inputs {
            command.args(["--input", input]);
        }
        command.args(["--mode", "eager,graph,nimble", "--optimize", "both", "--exact-check", "--warmup", &args.warmup.to_string(), "--iters", &args.iterations.to_string(), "--out"]).arg(&out);
        command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        Ok(command.spawn()?)
    })();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return failed(Status::Other, format!("could not start the model's process: {error:#}")),
    };
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > args.timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return failed(Status::Timeout, format!("still running after {} s; killed", args.timeout.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(error) => return failed(Status::Other, format!("waiting for the model's process: {error}")),
        }
    };
    let text = nimble_graph::json::read_text(&log).unwrap_or_default();
    let last_error = text.lines().rev().find_map(|l| l.strip_prefix("error: ")).map(str::to_string);
    if status.success() {
        let record = nimble_graph::json::read_text(&out).map_err(|e| e.to_string()).and_then(|t| serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string()));
        return match record.and_then(|r| ModelOutcome::from_infer_record(entry, 0, &r, started.elapsed().as_secs_f64())) {
            Ok(outcome) => outcome,
            Err(error) => failed(Status::Other, format!("the model's infer record: {error}")),
        };
    }
    match (status.code(), last_error) {
        (Some(_), Some(error)) => failed(Status::classify(&error), error),
        (code, _) => {
            // No `error:` line: the process died (a C++ abort, a fault) or exited oddly; its last
            // lines say how.
            let tail: Vec<&str> = text.lines().rev().filter(|l| !l.trim().is_empty()).take(3).collect();
            let how = code.map_or_else(|| signal_of(&status), |c| format!("exited with status {c}"));
            failed(if code.is_none() { Status::Crash } else { Status::Other }, format!("{how}: {}", tail.into_iter().rev().collect::<Vec<_>>().join(" | ")))
        }
    }
}

#[cfg(unix)]
fn signal_of(status: &std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    status.signal().map_or("killed".to_string(), |s| format!("killed by signal {s}"))
}

#[cfg(not(unix))]
fn signal_of(_status: &std::process::ExitStatus) -> String {
    "killed".to_string()
}

fn progress_line(m: &ModelOutcome) -> String {
    match (&m.optimized, m.speedup_over_eager()) {
        (Some(o), Some(eager)) => format!(
            "{}: ok, {eager:.2}x over eager, {:.2}x over one stream, {} streams, prepare {:.2} s ({:.0} s in all){}{}",
            m.name,
            o.graph_ms / o.nimble_ms,
            o.streams,
            o.prepare_s,
            m.process_s,
            m.allocated_after_drop_bytes.map_or(String::new(), |b| format!(", {:+.1} MiB allocated after drop", b as f64 / (1 << 20) as f64)),
            if m.vacuous_check { "; the check proves little (see reference_scale, input_sensitive)" } else { "" }
        ),
        _ => format!("{}: {}: {}", m.name, m.status.name(), m.error.as_deref().unwrap_or("")),
    }
}

