//! The data-parallel scaling record: the whole training step (forward on Nimble's streams, loss,
//! backward with the gradient all-reduces captured in the graph, fused SGD) on 1, 2, … GPUs, one
//! process per GPU, at a fixed per-GPU batch (weak scaling, as data parallelism is used).
//!
//! Each rank times its own steps (CUDA events around each replay, median); the ranks move in
//! lockstep because every step's all-reduces wait for all of them, so a configuration's step time
//! is the slowest rank's median and its throughput `gpus × batch / step`. Libtorch-free: the
//! records are read and merged here, measured by `nimble-bench train --gpus`.

use nimble_cuda::Samples;
use serde::{Deserialize, Serialize};

use crate::record::Provenance;

/// What one rank measured for one model and per-GPU batch.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RankRow {
    pub model: String,
    pub batch: i64,
    pub rank: usize,
    pub samples_us: Vec<f64>,
    /// The rank's prepare report (`nimble_torch::PrepareReport`, as JSON).
    #[serde(default)]
    pub prepare: serde_json::Value,
    /// When profiled: the collectives against the rest, per step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<CommTime>,
}

/// Per step, from a device profile: how long NCCL's kernels ran, how long the other work ran,
/// and how much of NCCL's time nothing else overlapped.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CommTime {
    pub nccl_us: f64,
    pub compute_us: f64,
    pub exposed_us: f64,
}

/// One model at one per-GPU batch on `gpus` GPUs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScalingRow {
    pub model: String,
    /// Per GPU.
    pub batch: i64,
    pub gpus: usize,
    /// Rank 0's step times.
    pub step: Samples,
    /// Every rank's median step time, µs.
    pub rank_medians_us: Vec<f64>,
    /// Training samples per second over all GPUs, from the slowest rank's median.
    pub samples_per_s: f64,
    /// Rank 0's prepare report.
    pub prepare: serde_json::Value,
    /// Rank 0's profile summary, when profiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<CommTime>,
}

/// A scaling measurement, as committed under `paper-figs/results/`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ScalingRecord {
    pub experiment: String,
    pub provenance: Provenance,
    pub libtorch: String,
    /// NCCL's version, as libtorch loaded it.
    pub nccl: String,
    pub precision: String,
    pub optimizer: String,
    /// Gradient bytes per all-reduce bucket, and in the first (the last layers' gradients).
    pub bucket_bytes: usize,
    pub first_bucket_bytes: usize,
    /// The priority of the all-reduces' stream: high or normal.
    #[serde(default)]
    pub comm_stream_priority: String,
    /// Gradients of fewer bytes were packed into their bucket's flat tensor, larger ones
    /// all-reduced in place; `None` (and records from before the choice): every gradient packed.
    #[serde(default)]
    pub pack_below_bytes: Option<usize>,
    /// Whether the one-GPU rows ran as a data-parallel group of one rank (reducer included)
    /// rather than alone.
    #[serde(default)]
    pub one_gpu_rank: bool,
    /// How BatchNorm is treated across ranks.
    pub batch_norm: String,
    pub rows: Vec<ScalingRow>,
}

/// Merges every rank's rows for `gpus` GPUs into one row per model and batch, in rank 0's order.
/// Fails when a rank is missing a row another has, or a rank number is out of range.
pub fn merge(gpus: usize, ranks: &[Vec<RankRow>]) -> Result<Vec<ScalingRow>, String> {
    if ranks.len() != gpus {
        return Err(format!("{} ranks reported, expected {gpus}", ranks.len()));
    }
    let mut rows = Vec::new();
    for first in &ranks[0] {
        let mut medians = Vec::with_capacity(gpus);
        for (rank, rows) in ranks.iter().enumerate() {
            let row = rows
                .iter()
                .find(|r| r.model == first.model && r.batch == first.batch)
                .ok_or_else(|| format!("rank {rank} has no measurement of {} at batch {}", first.model, first.batch))?;
            if row.rank != rank {
                return Err(format!("the rows of rank {rank} say rank {}", row.rank));
            }
            medians.push(Samples::new(row.samples_us.clone()).median_us);
        }
        let slowest = medians.iter().cloned().fold(f64::NAN, f64::max);
        rows.push(ScalingRow {
            model: first.model.clone(),
            batch: first.batch,
            gpus,
            step: Samples::new(first.samples_us.clone()),
            rank_medians_us: medians,
            samples_per_s: gpus as f64 * first.batch as f64 / (slowest * 1e-6),
            prepare: first.prepare.clone(),
            comm: first.comm.clone(),
        });
    }
    Ok(rows)
}

/// Throughput on `row.gpus` GPUs over the same model and per-GPU batch on one GPU, when the
/// record has both.
pub fn speedup(rows: &[ScalingRow], row: &ScalingRow) -> Option<f64> {
    let one = rows.iter().find(|r| r.gpus == 1 && r.model == row.model && r.batch == row.batch)?;
    Some(row.samples_per_s / one.samples_per_s)
}

/// The ring all-reduce's cost: `latency + 2 (N − 1) / N · bytes / bus bandwidth` on N GPUs
/// (NCCL's bus bandwidth convention), fitted to measured times, so that a collective's cost can
/// be projected to more GPUs; `scaling_model` prices each bucket's all-reduce with it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct AllReduceModel {
    pub latency_us: f64,
    /// Bytes per microsecond (= MB/s); 1e3 of them are 1 GB/s.
    pub bus_bytes_per_us: f64,
}

impl AllReduceModel {
    /// Microseconds for an all-reduce of `bytes` over `gpus` GPUs (0 on one GPU).
    pub fn time_us(&self, bytes: f64, gpus: usize) -> f64 {
        if gpus <= 1 {
            return 0.0;
        }
        let traffic = 2.0 * (gpus as f64 - 1.0) / gpus as f64 * bytes;
        self.latency_us + traffic / self.bus_bytes_per_us
    }

    /// Least squares over `(bytes, microseconds)` measured on `gpus` GPUs. Needs two sizes or
    /// more on more than one GPU, and times that grow with the size.
    pub fn fit(points: &[(f64, f64)], gpus: usize) -> Result<AllReduceModel, String> {
        if gpus < 2 {
            return Err(format!("an all-reduce on {gpus} GPU costs nothing to fit; expected two GPUs or more"));
        }
        if points.len() < 2 {
            return Err(format!("{} measured sizes; expected two or more", points.len()));
        }
        let scale = 2.0 * (gpus as f64 - 1.0) / gpus as f64;
        let n = points.len() as f64;
        let (mx, my) = (points.iter().map(|p| scale * p.0).sum::<f64>() / n, points.iter().map(|p| p.1).sum::<f64>() / n);
        let sxx: f64 = points.iter().map(|p| (scale * p.0 - mx).powi(2)).sum();
        let sxy: f64 = points.iter().map(|p| (scale * p.0 - mx) * (p.1 - my)).sum();
        let slope = sxy / sxx;
        if !slope.is_finite() || slope <= 0.0 {
            return Err("the measured times do not grow with the size; expected sizes far apart".into());
        }
        Ok(AllReduceModel { latency_us: (my - slope * mx).max(0.0), bus_bytes_per_us: 1.0 / slope })
    }
}

/// One all-reduce size as measured (`nimble-bench allreduce`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AllReduceRow {
    pub bytes: u64,
    /// Rank 0's times, µs.
    pub time: Samples,
    /// Every rank's median, µs.
    pub rank_medians_us: Vec<f64>,
}

/// An all-reduce measurement with its fitted model, as committed under `paper-figs/results/`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AllReduceRecord {
    pub experiment: String,
    pub provenance: Provenance,
    pub nccl: String,
    pub gpus: usize,
    pub rows: Vec<AllReduceRow>,
    pub model: AllReduceModel,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(model: &str, batch: i64, rank: usize, us: f64) -> RankRow {
        RankRow { model: model.into(), batch, rank, samples_us: vec![us, us + 2.0, us - 2.0], prepare: serde_json::Value::Null, comm: None }
    }

    #[test]
    fn the_slowest_rank_sets_the_throughput() {
        let ranks = vec![vec![row("a", 32, 0, 1000.0), row("b", 32, 0, 500.0)], vec![row("b", 32, 1, 500.0), row("a", 32, 1, 1250.0)]];
        let rows = merge(2, &ranks).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].model, "a");
        assert_eq!(rows[0].rank_medians_us, vec![1000.0, 1250.0]);
        assert!((rows[0].samples_per_s - 2.0 * 32.0 / 1.25e-3).abs() < 1e-6);
        let one = ScalingRow { gpus: 1, samples_per_s: 32.0 / 1e-3, ..rows[0].clone() };
        let all = vec![one, rows[0].clone()];
        assert!((speedup(&all, &all[1]).unwrap() - 1.6).abs() < 1e-9);
        assert!(speedup(&all[1..], &all[1]).is_none());
    }

    #[test]
    fn the_all_reduce_model_fits_a_ring_and_projects_more_gpus() {
        let truth = AllReduceModel { latency_us: 12.0, bus_bytes_per_us: 300_000.0 };
        let points: Vec<(f64, f64)> = [1e5, 1e6, 1e7, 1e8].iter().map(|&b| (b, truth.time_us(b, 2))).collect();
        let fit = AllReduceModel::fit(&points, 2).unwrap();
        assert!((fit.latency_us - 12.0).abs() < 1e-6 && (fit.bus_bytes_per_us - 300_000.0).abs() < 1e-3, "{fit:?}");
        // Eight GPUs move 1.75× the bytes of two for the same buffer.
        assert!((fit.time_us(1e8, 8) - 12.0 - 1.75e8 / 300_000.0).abs() < 1e-6);
        assert_eq!(fit.time_us(1e8, 1), 0.0);
        assert!(AllReduceModel::fit(&points, 1).unwrap_err().contains("expected two GPUs"));
        assert!(AllReduceModel::fit(&points[..1], 2).unwrap_err().contains("1 measured sizes"));
        assert!(AllReduceModel::fit(&[(1e5, 50.0), (1e8, 10.0)], 2).unwrap_err().contains("do not grow"));
    }

    #[test]
    fn missing_or_mislabelled_ranks_are_errors() {
        let e = merge(2, &[vec![row("a", 32, 0, 1.0)], vec![]]).unwrap_err();
        assert!(e.contains("rank 1 has no measurement of a at batch 32"), "{e}");
        let e = merge(2, &[vec![row("a", 32, 0, 1.0)], vec![row("a", 32, 0, 1.0)]]).unwrap_err();
        assert!(e.contains("the rows of rank 1 say rank 0"), "{e}");
        assert!(merge(3, &[vec![]]).unwrap_err().contains("1 ranks reported, expected 3"));
    }
}
