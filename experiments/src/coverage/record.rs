//! The coverage record (`paper-figs/results/coverage.json`): the runs that measured it, the
//! models' outcomes, the population's summary, and the merging of records measured in parts.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{median, ModelOutcome, Status, NOISE_FLOOR};
use crate::record::Provenance;

/// One run of `nimble-bench coverage`: where and how it measured, and over which export.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Part {
    pub provenance: Provenance,
    pub libtorch: String,
    pub precision: String,
    /// The manifest without its models: the exporting PyTorch, device and batch.
    pub exporter: serde_json::Value,
    /// Seconds one model's process may run.
    pub timeout_s: f64,
}

/// The record `paper-figs/results/coverage.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CoverageRecord {
    pub experiment: String,
    pub parts: Vec<Part>,
    pub models: Vec<ModelOutcome>,
    /// Recomputed from `models` whenever the record is written.
    pub summary: Summary,
}

impl CoverageRecord {
    pub fn new(part: Part, models: Vec<ModelOutcome>) -> CoverageRecord {
        let summary = Summary::of(&models);
        CoverageRecord { experiment: "coverage".into(), parts: vec![part], models, summary }
    }

    /// One record of several measured in parts (the parts renumbered). Each model once, except
    /// that a model which failed may be measured again in a later record (a re-run after a fix):
    /// the later outcome replaces the failure, and its part keeps the commit that measured it.
    pub fn merge(records: Vec<CoverageRecord>) -> Result<CoverageRecord, String> {
        let mut parts = Vec::new();
        let mut models: Vec<ModelOutcome> = Vec::new();
        for record in records {
            if record.experiment != "coverage" {
                return Err(format!("a record of experiment `{}`, expected `coverage`", record.experiment));
            }
            let offset = parts.len();
            parts.extend(record.parts);
            for mut model in record.models {
                model.part += offset;
                match models.iter_mut().find(|m| m.name == model.name) {
                    Some(earlier) if earlier.status != Status::Ok => *earlier = model,
                    Some(_) => return Err(format!("model `{}` is in more than one record; measure each model once (only a failure may be measured again)", model.name)),
                    None => models.push(model),
                }
            }
        }
        let summary = Summary::of(&models);
        Ok(CoverageRecord { experiment: "coverage".into(), parts, models, summary })
    }
}

/// The population's numbers, as the README reports them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub population: usize,
    /// Prepared and matched eager, with and without the rewrites.
    pub ok: usize,
    pub ok_fraction: f64,
    /// Models per status.
    pub statuses: BTreeMap<String, usize>,
    /// Geometric means over the models that ran: Nimble (rewrites on) over eager and over its own
    /// one-stream graph.
    #[serde(deserialize_with = "nan_if_null")]
    pub geomean_speedup_over_eager: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub geomean_speedup_over_one_stream: f64,
    /// Nimble over the one-stream graph where both are the same plan (see
    /// `ModelOutcome::same_plan`): the spread of two preparations of one graph in this run.
    pub same_plan: SamePlan,
    /// What counts as noise when Nimble is compared with its one-stream graph: the largest of
    /// [`NOISE_FLOOR`], the same-plan spread, and the model's own sampling noise.
    pub noise: f64,
    /// Models on which Nimble was slower than its one-stream graph (either rewrite setting)
    /// beyond noise, and those slower by more than the floor but within the same-plan spread.
    pub slower_than_one_stream: Vec<String>,
    pub slower_within_noise: Vec<String>,
    /// Models whose check against eager proved little (see `ModelOutcome::vacuous_check`).
    pub vacuous_checks: Vec<String>,
    /// Nimble's prepare time (rewrites on), seconds: median and the slowest model.
    #[serde(deserialize_with = "nan_if_null")]
    pub prepare_median_s: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub prepare_max_s: f64,
    pub prepare_max_model: String,
    /// Models that measured memory after drop (`ModelOutcome::allocated_after_drop_bytes`), and
    /// those that kept some allocated after it.
    #[serde(default)]
    pub memory_after_drop_measured: usize,
    #[serde(default)]
    pub memory_kept_after_drop: Vec<String>,
}

/// Reads a number JSON wrote as `null` (serde_json writes NaN so: an undefined mean or
/// spread) back as NaN.
fn nan_if_null<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    Option::<f64>::deserialize(deserializer).map(|v| v.unwrap_or(f64::NAN))
}

/// Ratios of Nimble over the one-stream graph where the two are the same plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SamePlan {
    pub pairs: usize,
    #[serde(deserialize_with = "nan_if_null")]
    pub lowest: f64,
    #[serde(deserialize_with = "nan_if_null")]
    pub highest: f64,
}

impl Summary {
    pub fn of(models: &[ModelOutcome]) -> Summary {
        let ran: Vec<&ModelOutcome> = models.iter().filter(|m| m.status == Status::Ok).collect();
        let mut statuses = BTreeMap::new();
        for model in models {
            *statuses.entry(model.status.name().to_string()).or_insert(0) += 1;
        }
        let geomean = |values: Vec<f64>| if values.is_empty() { f64::NAN } else { (values.iter().map(|v| v.ln()).sum::<f64>() / values.len() as f64).exp() };
        let prepare: Vec<(f64, &str)> = ran.iter().filter_map(|m| Some((m.optimized.as_ref()?.prepare_s, m.name.as_str()))).collect();
        let slowest = prepare.iter().copied().max_by(|a, b| a.0.total_cmp(&b.0));
        let same: Vec<f64> = ran.iter().flat_map(|m| m.same_plan()).map(|g| g.against_one_stream.ratio).collect();
        let noise = same.iter().map(|r| (r - 1.0).abs()).fold(NOISE_FLOOR, f64::max);
        // Models slower than their one-stream graph by more than `bound` (and their own sampling
        // noise) under either rewrite setting.
        let slower = |bound: f64| -> Vec<String> {
            ran.iter()
                .filter(|m| [&m.optimized, &m.raw].into_iter().flatten().any(|g| g.against_one_stream.ratio > 1.0 + bound.max(g.against_one_stream.sampling_noise)))
                .map(|m| m.name.clone())
                .collect()
        };
        Summary {
            population: models.len(),
            ok: ran.len(),
            ok_fraction: if models.is_empty() { 0.0 } else { ran.len() as f64 / models.len() as f64 },
            statuses,
            geomean_speedup_over_eager: geomean(ran.iter().filter_map(|m| m.speedup_over_eager()).collect()),
            geomean_speedup_over_one_stream: geomean(ran.iter().filter_map(|m| m.speedup_over_one_stream()).collect()),
            same_plan: SamePlan { pairs: same.len(), lowest: same.iter().copied().fold(f64::NAN, f64::min), highest: same.iter().copied().fold(f64::NAN, f64::max) },
            noise,
            slower_than_one_stream: slower(noise),
            slower_within_noise: slower(NOISE_FLOOR).into_iter().filter(|m| !slower(noise).contains(m)).collect(),
            vacuous_checks: ran.iter().filter(|m| m.vacuous_check).map(|m| m.name.clone()).collect(),
            prepare_median_s: median(&prepare.iter().map(|p| p.0).collect::<Vec<_>>()),
            prepare_max_s: slowest.map_or(f64::NAN, |s| s.0),
            prepare_max_model: slowest.map_or(String::new(), |s| s.1.to_string()),
            memory_after_drop_measured: ran.iter().filter(|m| m.allocated_after_drop_bytes.is_some()).count(),
            memory_kept_after_drop: ran.iter().filter(|m| m.allocated_after_drop_bytes.is_some_and(|b| b > 0)).map(|m| m.name.clone()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::tests::{entry, infer_record};

    #[test]
    fn the_summary_counts_statuses_and_takes_geometric_means() {
        let ok = ModelOutcome::from_infer_record(&entry("a"), 0, &infer_record(), 3.0).unwrap();
        let mut faster = ok.clone();
        faster.name = "b".into();
        faster.eager_ms = Some(1.0);
        let failed = ModelOutcome::failed(&entry("c"), 0, Status::HostSync, "the forward synchronizes with the host".into(), 1.0);
        let summary = Summary::of(&[ok.clone(), faster.clone(), failed.clone()]);
        assert_eq!((summary.population, summary.ok), (3, 2));
        assert_eq!(summary.statuses["host-sync"], 1);
        assert!((summary.geomean_speedup_over_eager - (8.0f64 * 2.0).sqrt()).abs() < 1e-9);
        // Without same-plan pairs the floor decides: 1.3 ms against 1.2 ms is beyond it.
        assert_eq!((summary.same_plan.pairs, summary.noise), (0, NOISE_FLOOR));
        assert_eq!(summary.slower_than_one_stream, vec!["a", "b"]);
        assert_eq!(summary.prepare_max_s, 0.4);
        // A model whose one-stream plan in the same layout took 10% longer than the one-stream
        // graph shows that two preparations of one graph differ that much: 8% is then noise.
        let mut same = ok.clone();
        same.name = "same".into();
        let raw = same.raw.as_mut().unwrap();
        (raw.streams, raw.against_one_stream.ratio) = (1, 1.1);
        let summary = Summary::of(&[ok, same, failed]);
        assert_eq!(summary.same_plan, SamePlan { pairs: 1, lowest: 1.1, highest: 1.1 });
        assert!((summary.noise - 0.1).abs() < 1e-12);
        assert!(summary.slower_than_one_stream.is_empty());
        assert_eq!(summary.slower_within_noise, vec!["a", "same"]);
    }

    #[test]
    fn merged_parts_keep_each_model_once() {
        let part = || Part {
            provenance: Provenance {
                gpu: "test".into(),
                compute_capability: "9.0".into(),
                multiprocessors: 1,
                driver_cuda_version: "13.0".into(),
                driver_version: None,
                date_utc: "2026-11-23T00:00:00Z".into(),
                commit: "c".into(),
                warmup: 1,
                iterations: 1,
                method: "test".into(),
            },
            libtorch: "2.11.0".into(),
            precision: "float32".into(),
            exporter: serde_json::json!({}),
            timeout_s: 1.0,
        };
        let outcome = |name: &str| ModelOutcome::failed(&entry(name), 0, Status::Other, "x".into(), 0.0);
        let merged = CoverageRecord::merge(vec![CoverageRecord::new(part(), vec![outcome("a")]), CoverageRecord::new(part(), vec![outcome("b")])]).unwrap();
        assert_eq!(merged.parts.len(), 2);
        assert_eq!(merged.models[1].part, 1);
        assert_eq!(merged.summary.population, 2);
        // A failure measured again after a fix: the later outcome replaces it, in its own part.
        let mut fixed = outcome("a");
        fixed.status = Status::Ok;
        let again = CoverageRecord::merge(vec![CoverageRecord::new(part(), vec![outcome("a"), outcome("b")]), CoverageRecord::new(part(), vec![fixed.clone()])]).unwrap();
        assert_eq!((again.models.len(), again.models[0].status, again.models[0].part), (2, Status::Ok, 1));
        // A success measured twice is a mistake.
        let twice = CoverageRecord::merge(vec![CoverageRecord::new(part(), vec![fixed.clone()]), CoverageRecord::new(part(), vec![fixed])]).unwrap_err();
        assert!(twice.contains("`a` is in more than one record"), "{twice}");
    }
}
