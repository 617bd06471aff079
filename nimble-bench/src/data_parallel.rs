//! `train --gpus`: the whole training step data parallel over NCCL, one process per GPU, started
//! by this command as `torchrun` would start them, and the scaling record they make.
//!
//! ```text
//! train --gpus 1,2 …   for 1: measures the one-GPU whole step in this process
//!                      for N > 1: makes an NCCL id, starts N `train-rank` processes of this
//!                      binary (rank r on GPU r; NIMBLE_RANK, NIMBLE_WORLD_SIZE, NIMBLE_LOCAL_RANK,
//!                      NIMBLE_NCCL_ID, NCCL_NVLS_ENABLE=0), waits (a failed rank stops the others,
//!                      which would otherwise wait in NCCL for ever) and merges their rows
//! train-rank …         one rank: joins the communicator, measures every model and batch, writes
//!                      its rows (JSON) to --out
//! ```
//!
//! Ranks on several hosts: start `nimble-bench train-rank` on each host with the same
//! NIMBLE_NCCL_ID (made by a process that stays alive as NCCL's bootstrap root, such as a
//! launcher started with --gpus), NIMBLE_WORLD_SIZE the total and NIMBLE_RANK / NIMBLE_LOCAL_RANK
//! each rank's number and GPU; nothing in the ranks assumes one host.

use std::path::Path;
use std::rc::Rc;

use anyhow::{Context, Result};
use experiments::record::Provenance;
use experiments::scaling::{self, CommTime, RankRow, ScalingRecord, ScalingRow};
use experiments::tolerance::LIBTORCH_VERSION;
use experiments::training::{self, TrainConfig};
use nimble_torch::distributed::{nccl_version, DataParallel};

use crate::output::{emit, note, progress, write_file};
use crate::ranks;
use crate::scaling_figure::graph_path;
use crate::torch::{open_gpu, provenance_line, PRECISION};
use crate::torch_train::training_models;

/// What `train --gpus` and each rank measure.
pub struct ScalingArgs<'a> {
    pub models: &'a str,
    pub batches: &'a [i64],
    pub gpus: &'a [usize],
    pub algorithm: &'a str,
    pub warmup: usize,
    pub iterations: usize,
    pub bucket_mb: f64,
    pub first_bucket_mb: f64,
    /// The all-reduces' stream has normal priority instead of high.
    pub comm_normal_priority: bool,
    /// Gradients below this many MiB are packed into their bucket's flat tensor (`None`: all).
    pub pack_below_mb: Option<f64>,
    /// The one-GPU configuration runs as a group of one rank.
    pub one_gpu_rank: bool,
    /// Each rank profiles a few steps and writes their Chrome traces here.
    pub profile: Option<&'a Path>,
    /// The one-GPU measurement writes each model's forward task graph here (per-op times and
    /// parameters), `<model>-b<batch>.json`: what `scaling` projects more GPUs from.
    pub graphs: Option<&'a Path>,
    pub out: Option<&'a Path>,
}

impl ScalingArgs<'_> {
    /// The bucket sizes in bytes: the first, the others.
    fn check(&self) -> Result<(usize, usize)> {
        anyhow::ensure!(self.batches.iter().all(|&b| b >= 1), "--batch sizes must be at least 1");
        anyhow::ensure!(self.iterations >= 1, "--iters must be at least 1");
        for (flag, mb, default) in [("--bucket-mb", self.bucket_mb, 25), ("--first-bucket-mb", self.first_bucket_mb, 1)] {
            anyhow::ensure!(mb.is_finite() && mb > 0.0, "{flag} is {mb}, expected a positive number of MiB (DDP's default is {default})");
        }
        if let Some(mb) = self.pack_below_mb {
            anyhow::ensure!(mb.is_finite() && mb >= 0.0, "--pack-below-mb is {mb}, expected a number of MiB, 0 or more (0: no gradient is copied into its bucket)");
        }
        anyhow::ensure!(!self.one_gpu_rank || self.gpus.contains(&1), "--one-gpu-rank changes how the one-GPU step is measured, but --gpus has no 1");
        nimble_sched::algorithms::by_name(self.algorithm)?;
        training_models(self.models)?;
        Ok((mib_bytes(self.first_bucket_mb).max(1), mib_bytes(self.bucket_mb).max(1)))
    }

    /// Which gradients are packed, in bytes (`None`: all).
    fn pack_below_bytes(&self) -> Option<usize> {
        self.pack_below_mb.map(mib_bytes)
    }

    fn config(&self, batch: i64) -> TrainConfig {
        TrainConfig { batch, warmup: self.warmup, iterations: self.iterations, algorithm: self.algorithm.to_string(), check_steps: 0, ..TrainConfig::paper(batch) }
    }

    /// The arguments a rank process gets.
    fn rank_command(&self, out: &Path) -> Vec<String> {
        let batches: Vec<String> = self.batches.iter().map(i64::to_string).collect();
        let mut args = vec!["train-rank".to_string(), "--model".into(), self.models.into(), "--batch".into(), batches.join(",")];
        for (flag, value) in [("--algo", self.algorithm.to_string()), ("--warmup", self.warmup.to_string()), ("--iters", self.iterations.to_string()), ("--bucket-mb", self.bucket_mb.to_string()), ("--first-bucket-mb", self.first_bucket_mb.to_string())] {
            args.push(flag.into());
            args.push(value);
        }
        if self.comm_normal_priority {
            args.push("--comm-normal-priority".into());
        }
        if let Some(mb) = self.pack_below_mb {
            args.push("--pack-below-mb".into());
            args.push(mb.to_string());
        }
        if let Some(dir) = self.profile {
            args.push("--profile".into());
            args.push(dir.display().to_string());
        }
        args.push("--out".into());
        args.push(out.display().to_string());
        args
    }
}

/// Every model at every batch on this process's GPU, as one rank of `comm` (or alone).
fn measure(args: &ScalingArgs<'_>, device: usize, rank: usize, dp: Option<DataParallel>, mut done: impl FnMut(&RankRow)) -> Result<Vec<RankRow>> {
    let mut rows = Vec::new();
    for &batch in args.batches {
        for name in training_models(args.models)? {
            nimble_torch::cuda_synchronize()?;
            nimble_torch::cuda_empty_cache()?;
            let gpus = dp.as_ref().map_or(1, |dp| dp.comm.world());
            let trace = args.profile.map(|dir| dir.join(format!("{name}-b{batch}-{gpus}gpu-rank{rank}.trace.json")));
            let measured = training::measure_rank(name, &args.config(batch), device, dp.clone(), trace.as_deref())
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("rank {rank}: {name} at batch {batch}"))?;
            let (row, profile) = (measured.row, measured.profile);
            if let (Some(dir), None, Some(forward)) = (args.graphs, &dp, measured.forward) {
                write_file(&graph_path(dir, name, batch), &forward.to_json_string())?;
            }
            let comm = profile.map(|p| {
                let o = p.overlap(|a| a.name.starts_with("nccl") || a.name.contains("ncclDevKernel"));
                let per = |us: f64| us / training::PROFILED_STEPS as f64;
                CommTime { nccl_us: per(o.busy_us), compute_us: per(o.others_busy_us), exposed_us: per(o.exposed_us) }
            });
            let row = RankRow { model: name.into(), batch, rank, samples_us: row.step.samples_us, prepare: serde_json::to_value(&row.prepare)?, comm };
            done(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// `train-rank`: one rank, from the environment a launcher set.
pub fn rank_main(args: &ScalingArgs<'_>) -> Result<()> {
    let (first_bucket_bytes, bucket_bytes) = args.check()?;
    let comm = Rc::new(ranks::join("train-rank")?);
    let (rank, world, device) = (comm.rank(), comm.world(), comm.device());
    tch::Cuda::cudnn_set_benchmark(true);
    let dp = DataParallel::new(comm).bucket_bytes(bucket_bytes).first_bucket_bytes(first_bucket_bytes).high_priority(!args.comm_normal_priority).pack_below_bytes(args.pack_below_bytes());
    let rows = measure(args, device, rank, Some(dp), |row| {
        if rank == 0 {
            eprintln!("  {} at batch {} on {world} GPUs: {:.3} ms", row.model, row.batch, nimble_cuda::Samples::new(row.samples_us.clone()).median_us / 1000.0);
        }
    })?;
    let out = args.out.context("train-rank needs --out (where its rows go)")?;
    write_file(out, &serde_json::to_string(&rows)?)
}

fn mib_bytes(mb: f64) -> usize {
    (mb * 1024.0 * 1024.0).round() as usize
}

/// Starts `gpus` rank processes and merges what they measured.
fn launch(args: &ScalingArgs<'_>, gpus: usize, scratch: &Path) -> Result<Vec<ScalingRow>> {
    let texts = ranks::launch(gpus, scratch, "train", |out| args.rank_command(out))?;
    let mut all = Vec::new();
    for (rank, text) in texts.iter().enumerate() {
        all.push(serde_json::from_str::<Vec<RankRow>>(text).with_context(|| format!("parsing rank {rank}'s rows"))?);
    }
    scaling::merge(gpus, &all).map_err(anyhow::Error::msg)
}

/// `train --gpus`: the scaling measurement.
pub fn scaling_run(args: &ScalingArgs<'_>) -> Result<()> {
    let (first_bucket_bytes, bucket_bytes) = args.check()?;
    let visible = nimble_torch::cuda_device_count();
    for &gpus in args.gpus {
        anyhow::ensure!(gpus >= 1, "--gpus 0: expected at least one GPU per configuration");
        anyhow::ensure!(gpus <= visible, "--gpus {gpus} asks for {gpus} GPUs, but this machine has {visible}");
    }
    let gpu = open_gpu("train --gpus", "")?;
    let (major, minor, patch) = nccl_version()?;
    for dir in [args.profile, args.graphs].into_iter().flatten() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let scratch = std::env::temp_dir().join(format!("nimble-train-ranks-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let mut rows = Vec::new();
    for &gpus in args.gpus {
        eprintln!("train: whole step on {gpus} GPU{}", if gpus == 1 { "" } else { "s" });
        let measured = if gpus == 1 && !args.one_gpu_rank {
            let bar = progress(args.batches.len() * training_models(args.models)?.len(), "train 1 GPU");
            let ranks = measure(args, 0, 0, None, |row| {
                note(&bar, &format!("  {} at batch {}: {:.3} ms", row.model, row.batch, nimble_cuda::Samples::new(row.samples_us.clone()).median_us / 1000.0));
                bar.inc(1);
            })?;
            bar.finish_and_clear();
            scaling::merge(1, &[ranks]).map_err(anyhow::Error::msg)?
        } else {
            nimble_torch::cuda_empty_cache()?;
            launch(args, gpus, &scratch)?
        };
        rows.extend(measured);
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let method = "data parallel, one process per GPU; whole training step as one CUDA graph per rank (forward on Nimble's streams, backward, NCCL all-reduce of gradient buckets on their own stream, fused SGD); cuDNN benchmark on; fresh randn inputs and random labels for every step (made before timing); CUDA events around each step with no synchronization between steps (the host runs ahead, as in a training loop, so the ranks meet on the GPU and not at their hosts); each rank's median; a configuration's step is its slowest rank's";
    let record = ScalingRecord {
        experiment: "scaling".into(),
        provenance: Provenance::now(gpu.info(), args.warmup, args.iterations, method),
        libtorch: LIBTORCH_VERSION.into(),
        nccl: format!("{major}.{minor}.{patch}"),
        precision: PRECISION.into(),
        optimizer: training::optimizer_label(&args.config(args.batches[0])),
        bucket_bytes,
        first_bucket_bytes,
        comm_stream_priority: if args.comm_normal_priority { "normal" } else { "high" }.into(),
        pack_below_bytes: args.pack_below_bytes(),
        one_gpu_rank: args.one_gpu_rank,
        batch_norm: "per rank (each rank normalizes its own share of the batch, as DDP without SyncBatchNorm)".into(),
        rows,
    };
    if let Some(path) = args.out {
        write_file(path, &serde_json::to_string_pretty(&record)?)?;
    }
    emit(&scaling_table(&record))
}

fn scaling_table(record: &ScalingRecord) -> String {
    let mut text = format!("{}\n", provenance_line(&record.provenance, &record.libtorch, &format!("NCCL {}, data-parallel whole training step", record.nccl)));
    let mib = |bytes: usize| bytes as f64 / (1024.0 * 1024.0);
    let packing = record.pack_below_bytes.map_or("every gradient packed into its bucket".to_string(), |b| format!("gradients below {:.3} MiB packed, larger ones all-reduced in place", mib(b)));
    let one_gpu = if record.one_gpu_rank { "; 1 GPU measured as a group of one rank" } else { "" };
    text += &format!("buckets {:.2} MiB (first {:.2}), {packing}, all-reduce stream priority {}{one_gpu}\n", mib(record.bucket_bytes), mib(record.first_bucket_bytes), record.comm_stream_priority);
    text += &format!("{:<16} {:>6} {:>5} {:>10} {:>12} {:>9} {:>22}\n", "model", "batch", "GPUs", "step ms", "samples/s", "× 1 GPU", "NCCL µs (exposed)");
    for row in &record.rows {
        let speedup = scaling::speedup(&record.rows, row).map_or("-".into(), |s| format!("{s:.2}"));
        let slowest = row.rank_medians_us.iter().cloned().fold(f64::NAN, f64::max);
        let comm = row.comm.as_ref().map_or("-".into(), |c| format!("{:.0} ({:.0})", c.nccl_us, c.exposed_us));
        text += &format!("{:<16} {:>6} {:>5} {:>10.3} {:>12.0} {:>9} {:>22}\n", row.model, row.batch, row.gpus, slowest / 1000.0, row.samples_per_s, speedup, comm);
    }
    text.trim_end().to_string()
}
