//! `coverage`: every model of an exported population, each run by `nimble-bench infer
//! --torchscript` in a process of its own (a model that crashes, hangs or runs out of memory
//! costs only itself), gathered into one record with the class of every failure, and drawn.

use std::path::Path;

use anyhow::{Context, Result};
use experiments::coverage::CoverageRecord;

use crate::command_args::CoverageArgs;
use crate::output::{emit, write_file};

pub fn coverage(args: &CoverageArgs<'_>) -> Result<()> {
    let record = match (args.dir, args.merge) {
        #[cfg(feature = "torch")]
        (Some(dir), _) => crate::coverage_run::measure(dir, args)?,
        #[cfg(not(feature = "torch"))]
        (Some(_), _) => return Err(crate::libtorch::missing("`coverage DIR`")),
        (None, []) => read(args.results)?,
        (None, parts) => {
            let records = parts.iter().map(|p| read(p)).collect::<Result<Vec<_>>>()?;
            let merged = CoverageRecord::merge(records).map_err(anyhow::Error::msg)?;
            write_file(args.results, &serde_json::to_string_pretty(&merged)?)?;
            eprintln!("merged {} records into {}", parts.len(), args.results.display());
            merged
        }
    };
    let svg = args.out_dir.join("coverage.svg");
    std::fs::create_dir_all(args.out_dir).with_context(|| format!("creating {}", args.out_dir.display()))?;
    crate::plots::save(&crate::coverage_figure::CoverageFigure::new(&record)?, &svg)?;
    emit(&format!("{}\nfigure: {}", table(&record), svg.display()))
}

fn read(path: &Path) -> Result<CoverageRecord> {
    let text = nimble_graph::json::read_text(path).with_context(|| "no coverage record to re-render (measure one with `nimble-bench coverage DIR` on a GPU machine)")?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a coverage record", path.display()))
}

/// One line per model and the summary.
fn table(record: &CoverageRecord) -> String {
    let mut lines = Vec::new();
    for (i, part) in record.parts.iter().enumerate() {
        let p = &part.provenance;
        lines.push(format!(
            "part {i}: {} (driver {}, CUDA {}), libtorch {}, exported by PyTorch {}, {}, commit {}; ms, median of {} after {} warm-ups",
            p.gpu,
            p.driver_version.as_deref().unwrap_or("?"),
            p.driver_cuda_version,
            part.libtorch,
            part.exporter["torch"].as_str().unwrap_or("?"),
            p.date_utc,
            p.commit,
            p.iterations,
            p.warmup
        ));
    }
    lines.push(format!(
        "{:<22} {:<10} {:>8} {:>8} {:>8} {:>7} {:>7} {:>7} {:>8} {:>8} {:>8} {:>8}",
        "model", "status", "eager", "graph", "nimble", "x eager", "x graph", "streams", "prep s", "err opt", "err raw", "tf32 opt"
    ));
    for m in &record.models {
        let line = match (&m.optimized, &m.raw, m.eager_ms) {
            (Some(o), Some(r), Some(eager)) => format!(
                "{:<22} {:<10} {:>8.3} {:>8.3} {:>8.3} {:>7.2} {:>7.2} {:>7} {:>8.2} {:>8.1e} {:>8.1e} {:>8}{}{}",
                m.name,
                "ok",
                eager,
                o.graph_ms,
                o.nimble_ms,
                eager / o.nimble_ms,
                o.graph_ms / o.nimble_ms,
                o.streams,
                o.prepare_s,
                o.relative_error,
                r.relative_error,
                o.timed_relative_error.map_or("-".to_string(), |e| format!("{e:.1e}")),
                if record.summary.slower_than_one_stream.contains(&m.name) { "  slower than one stream" } else { "" },
                if m.vacuous_check { "  vacuous check" } else { "" }
            ),
            _ => format!("{:<22} {:<10} {}", m.name, m.status.name(), m.error.as_deref().unwrap_or("")),
        };
        lines.push(line);
    }
    let s = &record.summary;
    let statuses: Vec<String> = s.statuses.iter().map(|(k, v)| format!("{k} {v}")).collect();
    lines.push(format!(
        "{} of {} models prepared and matched eager ({:.1}%; {}); Nimble's geometric-mean speedup over eager {:.2}x, over its one-stream graph {:.2}x",
        s.ok,
        s.population,
        100.0 * s.ok_fraction,
        statuses.join(", "),
        s.geomean_speedup_over_eager,
        s.geomean_speedup_over_one_stream
    ));
    lines.push(format!(
        "Nimble against its one-stream graph: where both are the same plan ({} pairs), {:.3}..{:.3}x, so noise is {:.1}%; slower beyond it: {}; slower by more than {:.0}% but within it: {}",
        s.same_plan.pairs,
        s.same_plan.lowest,
        s.same_plan.highest,
        100.0 * s.noise,
        list_or_none(&s.slower_than_one_stream),
        100.0 * experiments::coverage::NOISE_FLOOR,
        list_or_none(&s.slower_within_noise)
    ));
    lines.push(format!(
        "prepare (rewrites on): median {:.2} s, slowest {:.2} s ({}); checks that prove little (reference zero or the same for every input): {}",
        s.prepare_median_s,
        s.prepare_max_s,
        s.prepare_max_model,
        list_or_none(&s.vacuous_checks)
    ));
    if s.memory_after_drop_measured > 0 {
        lines.push(format!(
            "memory after dropping the prepared graphs ({} models measured): more allocated than before prepare: {}",
            s.memory_after_drop_measured,
            list_or_none(&s.memory_kept_after_drop)
        ));
    }
    lines.join("\n")
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}
