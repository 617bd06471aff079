//! The coverage experiment: a whole population of models no Rust code of ours defines (the
//! exporter's torchvision, transformers and timm sets), exported as TorchScript files by
//! `experiments/python/export_torchscript.py`, each run from the CLI as a user would
//! (`nimble-bench infer --torchscript`), in a process of its own.
//!
//! This module holds what needs no GPU and calls no tch: the outcome of each model (measured, or
//! the class of its error) and the check that Nimble is not slower than its own one-stream graph
//! beyond noise; `manifest` reads the exporter's manifest, and `record` holds the record, its
//! summary and the merging of records measured in parts. `nimble-bench coverage` runs the models
//! and draws the figure.

mod manifest;
mod record;

use nimble_cuda::Samples;
use serde::{Deserialize, Serialize};

pub use manifest::{Manifest, ManifestEntry};
pub use record::{CoverageRecord, Part, SamePlan, Summary};

/// What became of one model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Prepared in every mode and matched eager within the tolerances.
    Ok,
    /// PyTorch could not trace or save it.
    Export,
    /// libtorch could not load the file, or its forward rejected the inputs.
    Load,
    /// The forward synchronizes with the host (a real one: on device tensors).
    HostSync,
    /// The forward's ops differ between passes (data-dependent control flow).
    Dynamic,
    /// CUDA graph capture failed.
    Capture,
    /// A prepared graph's output differs from eager beyond the tolerance.
    Mismatch,
    OutOfMemory,
    /// The model's process ran past the time limit and was killed.
    Timeout,
    /// The model's process died from a signal (a C++ abort, a fault).
    Crash,
    Other,
}

impl Status {
    /// The class of an error message of `nimble-bench infer` (its `error:` line).
    pub fn classify(message: &str) -> Status {
        let m = message.to_ascii_lowercase();
        if m.contains("synchronizes with the host") {
            Status::HostSync
        } else if m.contains("is not static") {
            Status::Dynamic
        } else if m.contains("out of memory") {
            Status::OutOfMemory
        } else if m.contains("output differs from eager") {
            Status::Mismatch
        } else if m.contains("capture") {
            Status::Capture
        } else if m.contains("jit_load") || m.contains("--input") || m.contains("forward argument") {
            Status::Load
        } else {
            Status::Other
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Export => "export",
            Status::Load => "load",
            Status::HostSync => "host-sync",
            Status::Dynamic => "dynamic",
            Status::Capture => "capture",
            Status::Mismatch => "mismatch",
            Status::OutOfMemory => "out-of-memory",
            Status::Timeout => "timeout",
            Status::Crash => "crash",
            Status::Other => "other",
        }
    }
}

/// The smallest relative difference of two medians that counts as more than noise, whatever
/// the spread measured: blocks of the same graph timed at different moments of one run differ by
/// up to about 2% (the zoo's before/after runs).
pub const NOISE_FLOOR: f64 = 0.02;

/// Nimble's latency against its own one-stream graph's (same rewrites) on one model.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgainstOneStream {
    /// Nimble's median over the one-stream graph's.
    pub ratio: f64,
    /// Twice the standard error of the medians' difference (from each set's median absolute
    /// deviation), relative to the one-stream median: the noise of the timed runs themselves.
    pub sampling_noise: f64,
}

impl AgainstOneStream {
    pub fn new(graph_us: &[f64], nimble_us: &[f64]) -> AgainstOneStream {
        let (graph, nimble) = (median(graph_us), median(nimble_us));
        let error = (median_standard_error(graph_us).powi(2) + median_standard_error(nimble_us).powi(2)).sqrt();
        AgainstOneStream { ratio: nimble / graph, sampling_noise: 2.0 * error / graph }
    }
}

fn median(samples: &[f64]) -> f64 {
    Samples::new(samples.to_vec()).median_us
}

/// The standard error of a sample median, from the median absolute deviation (robust to the
/// occasional slow run): 1.2533 · 1.4826 · MAD / √n, exact for normal samples.
fn median_standard_error(samples: &[f64]) -> f64 {
    let center = median(samples);
    let deviations: Vec<f64> = samples.iter().map(|x| (x - center).abs()).collect();
    1.2533 * 1.4826 * median(&deviations) / (samples.len() as f64).sqrt()
}

/// The two graph modes under one rewrite setting.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GraphModes {
    /// One-stream CUDA graph and Nimble's streams: median latency, milliseconds.
    pub graph_ms: f64,
    pub nimble_ms: f64,
    /// The larger of the two graphs' relative errors against eager (in exact float32 when the
    /// run checked so), the tolerance that judged it, and the timed graphs' larger error against
    /// eager in the timing's precision (TF32 convolutions), recorded and not judged.
    pub relative_error: f64,
    pub tolerance: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timed_relative_error: Option<f64>,
    pub against_one_stream: AgainstOneStream,
    /// Nimble's plan and graph.
    pub streams: usize,
    pub syncs: usize,
    pub tasks: usize,
    pub kernel_nodes: usize,
    /// The layouts Nimble's graph and the one-stream graph were prepared in (each chose its own
    /// when the layout was left to measurement).
    pub channels_last: bool,
    pub graph_channels_last: bool,
    /// Nimble's prepare, wall-clock seconds (the layout trial included).
    pub prepare_s: f64,
}

/// One model's outcome.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelOutcome {
    pub name: String,
    pub source: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<u64>,
    /// The exporter's changes to the random initialization.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weights: Vec<String>,
    pub status: Status,
    /// Why it did not run (the `error:` line, or what killed its process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Index into the record's `parts`: which run measured it.
    pub part: usize,
    /// Seconds the model's process ran (load, prepare, check and timing).
    pub process_s: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eager_ms: Option<f64>,
    /// With the inference rewrites (what a user gets by default) and without them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub optimized: Option<GraphModes>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<GraphModes>,
    /// max |eager output| on the check's input, and whether eager's output depends on the input
    /// (see `inference::Check`); `vacuous` when either makes the check prove little.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_scale: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_sensitive: Option<bool>,
    #[serde(default)]
    pub vacuous_check: bool,
    /// Bytes still allocated on the device after every graph the model prepared was dropped,
    /// over what was allocated before its first prepare (`InferRow::allocated_after_drop_bytes`;
    /// at most 0: every byte given back). Absent in records measured before it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_after_drop_bytes: Option<i64>,
}

impl ModelOutcome {
    /// A model that did not run, with the class and message of why.
    pub fn failed(entry: &ManifestEntry, part: usize, status: Status, error: String, process_s: f64) -> ModelOutcome {
        ModelOutcome { status, error: Some(error), ..ModelOutcome::unmeasured(entry, part, process_s) }
    }

    /// What the manifest says of `entry`, nothing measured yet.
    fn unmeasured(entry: &ManifestEntry, part: usize, process_s: f64) -> ModelOutcome {
        ModelOutcome {
            name: entry.name.clone(),
            source: entry.source.clone(),
            inputs: entry.inputs.clone(),
            parameters: entry.parameters,
            weights: entry.weights.clone(),
            status: Status::Other,
            error: None,
            part,
            process_s,
            eager_ms: None,
            optimized: None,
            raw: None,
            reference_scale: None,
            input_sensitive: None,
            vacuous_check: false,
            allocated_after_drop_bytes: None,
        }
    }

    /// The outcome read from the `infer` record the model's process wrote (rows of eager and of
    /// the graph and nimble modes, with and without the rewrites).
    pub fn from_infer_record(entry: &ManifestEntry, part: usize, record: &serde_json::Value, process_s: f64) -> Result<ModelOutcome, String> {
        let rows = record["rows"].as_array().ok_or("the infer record has no `rows`")?;
        let row = |mode: &str, optimized: bool| {
            rows.iter().find(|r| r["mode"] == mode && (mode == "eager" || r["optimized"] == optimized)).ok_or_else(|| format!("the infer record lacks the {mode} row (rewrites {optimized})"))
        };
        let samples = |row: &serde_json::Value| -> Result<Vec<f64>, String> {
            row["latency"]["samples_us"].as_array().ok_or("a row without latency samples")?.iter().map(|v| v.as_f64().ok_or_else(|| "a latency sample that is not a number".to_string())).collect()
        };
        let eager = samples(row("eager", false)?)?;
        let modes = |optimized: bool| -> Result<GraphModes, String> {
            let (graph, nimble) = (row("graph", optimized)?, row("nimble", optimized)?);
            let (graph_us, nimble_us) = (samples(graph)?, samples(nimble)?);
            let prepare = &nimble["prepare"];
            let count = |key: &str| prepare[key].as_u64().map(|n| n as usize).ok_or_else(|| format!("the nimble row's prepare report lacks `{key}`"));
            let error = |r: &serde_json::Value| r["relative_error"].as_f64().unwrap_or(f64::INFINITY);
            Ok(GraphModes {
                graph_ms: median(&graph_us) / 1000.0,
                nimble_ms: median(&nimble_us) / 1000.0,
                relative_error: error(graph).max(error(nimble)),
                timed_relative_error: [graph, nimble].iter().filter_map(|r| r["timed_relative_error"].as_f64()).reduce(f64::max),
                tolerance: if optimized { crate::tolerance::OPTIMIZED_TOLERANCE } else { crate::tolerance::RAW_TOLERANCE },
                against_one_stream: AgainstOneStream::new(&graph_us, &nimble_us),
                streams: count("streams")?,
                syncs: count("syncs")?,
                tasks: count("tasks")?,
                kernel_nodes: count("kernel_nodes")?,
                channels_last: prepare["channels_last"].as_bool().unwrap_or(false),
                graph_channels_last: graph["prepare"]["channels_last"].as_bool().unwrap_or(false),
                prepare_s: prepare["seconds"]["total"].as_f64().ok_or("the nimble row's prepare report lacks `seconds.total`")?,
            })
        };
        let optimized = modes(true)?;
        let checked = rows.iter().filter(|r| r["mode"] != "eager");
        let reference_scale = checked.clone().filter_map(|r| r["reference_scale"].as_f64()).fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.min(x))));
        let input_sensitive = checked.filter_map(|r| r["input_sensitive"].as_bool()).reduce(|a, b| a && b);
        Ok(ModelOutcome {
            status: Status::Ok,
            eager_ms: Some(median(&eager) / 1000.0),
            optimized: Some(optimized),
            raw: Some(modes(false)?),
            reference_scale,
            input_sensitive,
            vacuous_check: reference_scale.is_some_and(|s| s == 0.0) || input_sensitive == Some(false),
            allocated_after_drop_bytes: rows.iter().find_map(|r| r["allocated_after_drop_bytes"].as_i64()),
            ..ModelOutcome::unmeasured(entry, part, process_s)
        })
    }

    /// Nimble's speedup over eager, rewrites on.
    pub fn speedup_over_eager(&self) -> Option<f64> {
        Some(self.eager_ms? / self.optimized.as_ref()?.nimble_ms)
    }

    /// The rewrite settings under which Nimble's plan is one stream in the one-stream graph's
    /// layout: two preparations of the same graph, whose ratio shows how much two preparations
    /// of one graph differ.
    pub fn same_plan(&self) -> impl Iterator<Item = &GraphModes> {
        [&self.optimized, &self.raw].into_iter().flatten().filter(|g| g.streams == 1 && g.channels_last == g.graph_channels_last)
    }

    /// Nimble's speedup over its own one-stream graph, rewrites on.
    pub fn speedup_over_one_stream(&self) -> Option<f64> {
        self.optimized.as_ref().map(|o| o.graph_ms / o.nimble_ms)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn errors_are_classified_by_what_infer_says() {
        let cases = [
            ("measuring x: the forward synchronizes with the host at op #3 (aten::item, through ...)", Status::HostSync),
            ("the model is not static: in the capture pass, op #4 is aten::add, expected aten::mul", Status::Dynamic),
            ("libtorch (jit_forward): CUDA out of memory. Tried to allocate 2.00 GiB", Status::OutOfMemory),
            ("x (nimble mode, rewrites on): output differs from eager by 3.1e-1 (relative), more than 1e-2", Status::Mismatch),
            ("libtorch (capture_end): operation not permitted when stream is capturing", Status::Capture),
            ("libtorch (jit_load): PytorchStreamReader failed reading zip archive", Status::Load),
            ("something else entirely", Status::Other),
        ];
        for (message, status) in cases {
            assert_eq!(Status::classify(message), status, "{message}");
        }
    }

    #[test]
    fn sampling_noise_follows_the_spread_of_the_runs() {
        let graph: Vec<f64> = (0..100).map(|i| 1000.0 + (i % 10) as f64).collect();
        let slower: Vec<f64> = graph.iter().map(|x| x * 1.05).collect();
        let check = AgainstOneStream::new(&graph, &slower);
        assert!((check.ratio - 1.05).abs() < 1e-9 && check.sampling_noise < 0.01, "{check:?}");
        let noisy: Vec<f64> = (0..100).map(|i| 1000.0 + 400.0 * ((i * 37 % 100) as f64 / 100.0)).collect();
        let shifted: Vec<f64> = noisy.iter().map(|x| x * 1.03).collect();
        let check = AgainstOneStream::new(&noisy, &shifted);
        assert!(check.sampling_noise > 0.03, "{check:?}");
    }

    pub(crate) fn entry(name: &str) -> ManifestEntry {
        ManifestEntry { name: name.into(), file: format!("{name}.pt"), source: "test".into(), inputs: vec!["1x3x8x8:float32".into()], parameters: Some(10), export_s: None, error: None, weights: vec![] }
    }

    fn row(mode: &str, optimized: bool, us: f64, extra: serde_json::Value) -> serde_json::Value {
        let mut row = serde_json::json!({"mode": mode, "optimized": optimized, "latency": {"samples_us": vec![us; 10]}});
        if mode != "eager" {
            row["relative_error"] = serde_json::json!(1e-7);
            row["reference_scale"] = serde_json::json!(2.5);
            row["input_sensitive"] = serde_json::json!(true);
            row["prepare"] = serde_json::json!({"streams": 3, "syncs": 2, "tasks": 40, "kernel_nodes": 50, "channels_last": false, "seconds": {"total": 0.4}});
        }
        if let (Some(row), Some(extra)) = (row.as_object_mut(), extra.as_object()) {
            row.extend(extra.clone());
        }
        row
    }

    pub(crate) fn infer_record() -> serde_json::Value {
        let none = serde_json::json!({});
        serde_json::json!({"rows": [
            row("eager", false, 4000.0, none.clone()),
            row("graph", true, 1000.0, none.clone()),
            row("nimble", true, 500.0, none.clone()),
            row("graph", false, 1200.0, none.clone()),
            row("nimble", false, 1300.0, serde_json::json!({"input_sensitive": false})),
        ]})
    }

    #[test]
    fn an_infer_record_becomes_an_outcome_with_its_checks() {
        let outcome = ModelOutcome::from_infer_record(&entry("m"), 0, &infer_record(), 3.0).unwrap();
        assert_eq!(outcome.status, Status::Ok);
        assert_eq!(outcome.speedup_over_eager(), Some(8.0));
        assert_eq!(outcome.speedup_over_one_stream(), Some(2.0));
        let raw = outcome.raw.as_ref().unwrap();
        assert!((raw.against_one_stream.ratio - 1300.0 / 1200.0).abs() < 1e-12 && raw.against_one_stream.sampling_noise == 0.0);
        assert!(outcome.vacuous_check, "one row saw the same output for two inputs");
        let mut record = infer_record();
        record["rows"].as_array_mut().unwrap().remove(2);
        let error = ModelOutcome::from_infer_record(&entry("m"), 0, &record, 3.0).unwrap_err();
        assert!(error.contains("nimble row (rewrites true)"), "{error}");
    }

    #[test]
    fn memory_kept_after_drop_is_read_from_the_graph_rows_and_summarized() {
        assert_eq!(ModelOutcome::from_infer_record(&entry("m"), 0, &infer_record(), 3.0).unwrap().allocated_after_drop_bytes, None);
        let with = |bytes: i64| {
            let mut record = infer_record();
            for row in record["rows"].as_array_mut().unwrap().iter_mut().filter(|r| r["mode"] != "eager") {
                row["allocated_after_drop_bytes"] = serde_json::json!(bytes);
            }
            record
        };
        let kept = ModelOutcome::from_infer_record(&entry("kept"), 0, &with(33 << 20), 3.0).unwrap();
        let freed = ModelOutcome::from_infer_record(&entry("freed"), 0, &with(-(32 << 20)), 3.0).unwrap();
        let unmeasured = ModelOutcome::from_infer_record(&entry("old"), 0, &infer_record(), 3.0).unwrap();
        assert_eq!(kept.allocated_after_drop_bytes, Some(33 << 20));
        let summary = record::Summary::of(&[kept, freed, unmeasured]);
        assert_eq!((summary.memory_after_drop_measured, summary.memory_kept_after_drop), (2, vec!["kept".to_string()]));
    }
}
