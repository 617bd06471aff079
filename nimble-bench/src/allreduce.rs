//! `allreduce --gpus N`: NCCL all-reduce times over a range of sizes on N GPUs (one process per
//! GPU, like `train --gpus`) and the ring model fitted to them (`scaling::AllReduceModel`:
//! latency plus bytes over bus bandwidth), which prices the all-reduces when the simulator projects
//! a training step to more GPUs (`scaling --graphs`). Each size: float32 buffer, warm-ups, then each all-reduce (`ncclAvg`, in place, on the
//! current stream) timed with CUDA events, no synchronization between them; rank 0's median.

use std::path::Path;

use anyhow::{Context, Result};
use experiments::record::Provenance;
use experiments::scaling::{AllReduceModel, AllReduceRecord, AllReduceRow};
use nimble_cuda::Samples;
use nimble_torch::distributed::nccl_version;
use serde::{Deserialize, Serialize};
use tch::{Device, Kind, Tensor};

use crate::output::{emit, write_file};
use crate::ranks;
use crate::torch::{open_gpu, provenance_line};

/// What `allreduce` and each of its ranks measure.
pub struct AllReduceArgs<'a> {
    pub gpus: usize,
    pub sizes_mb: &'a [f64],
    pub warmup: usize,
    pub iterations: usize,
    pub out: Option<&'a Path>,
}

impl AllReduceArgs<'_> {
    fn check(&self) -> Result<Vec<u64>> {
        anyhow::ensure!(self.iterations >= 1, "--iters must be at least 1");
        anyhow::ensure!(!self.sizes_mb.is_empty(), "--sizes-mb is empty; expected sizes in MiB");
        self.sizes_mb
            .iter()
            .map(|&mb| {
                anyhow::ensure!(mb.is_finite() && mb > 0.0 && mb <= 4096.0, "--sizes-mb {mb}: expected sizes above 0 and at most 4096 MiB");
                Ok(((mb * 1024.0 * 1024.0) as u64 / 4).max(1) * 4)
            })
            .collect()
    }
}

/// What one rank measured at one size.
#[derive(Serialize, Deserialize)]
struct RankTime {
    bytes: u64,
    samples_us: Vec<f64>,
}

/// `allreduce-rank`: one rank, from the environment the launcher set.
pub fn rank_main(args: &AllReduceArgs<'_>, out: &Path) -> Result<()> {
    let sizes = args.check()?;
    let comm = ranks::join("allreduce-rank")?;
    let mut rows = Vec::new();
    for bytes in sizes {
        let buffer = Tensor::f_ones([(bytes / 4) as i64], (Kind::Float, Device::Cuda(comm.device())))?;
        let one = std::slice::from_ref(&buffer);
        for _ in 0..args.warmup {
            comm.all_reduce_mean(one)?;
        }
        nimble_torch::cuda_synchronize()?;
        let ms = nimble_torch::cuda_time_each(args.iterations, |_| comm.all_reduce_mean(one))?;
        rows.push(RankTime { bytes, samples_us: ms.into_iter().map(|ms| ms * 1000.0).collect() });
    }
    write_file(out, &serde_json::to_string(&rows)?)
}

/// `allreduce --gpus N`: launches the ranks, fits the model, prints and writes the record.
pub fn allreduce(args: &AllReduceArgs<'_>) -> Result<()> {
    args.check()?;
    let visible = nimble_torch::cuda_device_count();
    anyhow::ensure!(args.gpus >= 2, "--gpus {}: an all-reduce needs two GPUs or more", args.gpus);
    anyhow::ensure!(args.gpus <= visible, "--gpus {0} asks for {0} GPUs, but this machine has {visible}", args.gpus);
    let gpu = open_gpu("allreduce", "")?;
    let (major, minor, patch) = nccl_version()?;
    let scratch = std::env::temp_dir().join(format!("nimble-allreduce-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let sizes: Vec<String> = args.sizes_mb.iter().map(f64::to_string).collect();
    let texts = ranks::launch(args.gpus, &scratch, "allreduce", |out| {
        let mut command: Vec<String> = vec!["allreduce-rank".into(), "--sizes-mb".into(), sizes.join(",")];
        command.extend(["--warmup".into(), args.warmup.to_string(), "--iters".into(), args.iterations.to_string(), "--rank-out".into(), out.display().to_string()]);
        command
    });
    let _ = std::fs::remove_dir_all(&scratch);
    let ranks: Vec<Vec<RankTime>> = texts?.iter().map(|t| serde_json::from_str(t).context("parsing a rank's times")).collect::<Result<_>>()?;
    let mut rows = Vec::new();
    for (i, first) in ranks[0].iter().enumerate() {
        let rank_medians_us = ranks.iter().map(|r| Samples::new(r[i].samples_us.clone()).median_us).collect();
        rows.push(AllReduceRow { bytes: first.bytes, time: Samples::new(first.samples_us.clone()), rank_medians_us });
    }
    let points: Vec<(f64, f64)> = rows.iter().map(|r| (r.bytes as f64, r.time.median_us)).collect();
    let model = AllReduceModel::fit(&points, args.gpus).map_err(anyhow::Error::msg)?;
    let method = "float32 buffer, ncclAllReduce with ncclAvg in place on the current stream, one process per GPU (NCCL_NVLS_ENABLE=0); CUDA events around each all-reduce, no synchronization between them; rank 0's median; model fitted by least squares";
    let record = AllReduceRecord {
        experiment: "allreduce".into(),
        provenance: Provenance::now(gpu.info(), args.warmup, args.iterations, method),
        nccl: format!("{major}.{minor}.{patch}"),
        gpus: args.gpus,
        rows,
        model,
    };
    if let Some(path) = args.out {
        write_file(path, &serde_json::to_string_pretty(&record)?)?;
    }
    let mut text = format!("{}\n", provenance_line(&record.provenance, experiments::tolerance::LIBTORCH_VERSION, &format!("NCCL {}, all-reduce on {} GPUs", record.nccl, record.gpus)));
    text += &format!("{:>12} {:>12} {:>12} {:>14}\n", "bytes", "median µs", "model µs", "bus GB/s");
    for row in &record.rows {
        let traffic = 2.0 * (args.gpus as f64 - 1.0) / args.gpus as f64 * row.bytes as f64;
        text += &format!("{:>12} {:>12.1} {:>12.1} {:>14.1}\n", row.bytes, row.time.median_us, model.time_us(row.bytes as f64, args.gpus), traffic / row.time.median_us / 1e3);
    }
    text += &format!("model: {:.1} µs + 2(N−1)/N · bytes / {:.1} GB/s", model.latency_us, model.bus_bytes_per_us / 1e3);
    emit(&text)
}
