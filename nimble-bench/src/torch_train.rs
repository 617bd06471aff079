//! `train`: one training step per mode, model and batch size on the GPU, checked against eager
//! training, as a table and a record.

use std::path::Path;

use anyhow::{Context, Result};
use experiments::inference::LIBTORCH_VERSION;
use experiments::models::{self, Dataset};
use experiments::record::Provenance;
use experiments::training::{self, TrainConfig, TrainMode, TrainRecord, TrainRow};

use crate::output::{emit, note, progress, write_file};
use crate::torch::{model_names, open_gpu, provenance_line, PRECISION};

/// `train --backward-streams` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum BackwardArg {
    /// every backward op on one stream (the paper)
    One,
    /// each backward op on its forward op's stream
    Forward,
}

impl From<BackwardArg> for nimble_torch::BackwardStreams {
    fn from(arg: BackwardArg) -> Self {
        match arg {
            BackwardArg::One => nimble_torch::BackwardStreams::One,
            BackwardArg::Forward => nimble_torch::BackwardStreams::Forward,
        }
    }
}

/// What `train` measures.
pub struct TrainArgs<'a> {
    pub models: &'a str,
    pub batches: &'a [i64],
    pub modes: &'a [String],
    pub algorithm: &'a str,
    pub backward_streams: nimble_torch::BackwardStreams,
    pub warmup: usize,
    pub iterations: usize,
    pub check_steps: usize,
    pub out: Option<&'a Path>,
}

/// The training models `list` names (comma-separated, or `all`), each checked to be one.
pub(crate) fn training_models(list: &str) -> Result<Vec<&'static str>> {
    let names: Vec<&str> = if list == "all" { models::MODELS.iter().filter(|m| m.training).map(|m| m.name).collect() } else { model_names(list)? };
    for name in &names {
        let info = models::info(name).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(info.training, "`{name}` is not a training model; `nimble-bench models --dataset cifar10` lists them");
    }
    Ok(names)
}

/// `train`: one training step per mode, model and batch size, checked against eager training.
pub fn train(args: &TrainArgs<'_>) -> Result<()> {
    anyhow::ensure!(args.batches.iter().all(|&b| b >= 1), "--batch sizes must be at least 1");
    anyhow::ensure!(args.iterations >= 1, "--iters must be at least 1");
    nimble_sched::algorithms::by_name(args.algorithm)?;
    let modes: Vec<TrainMode> = args.modes.iter().map(|m| TrainMode::parse(m.trim())).collect::<Result<_, _>>().map_err(anyhow::Error::msg)?;
    let names = training_models(args.models)?;
    let gpu = open_gpu("train", "")?;
    let mut rows = Vec::new();
    let mut config = TrainConfig::paper(args.batches[0]);
    let bar = progress(args.batches.len() * names.len(), "train");
    for &batch in args.batches {
        for name in &names {
            bar.set_message(format!("{name} at batch {batch}"));
            config = TrainConfig {
                batch,
                warmup: args.warmup,
                iterations: args.iterations,
                algorithm: args.algorithm.to_string(),
                backward_streams: args.backward_streams,
                check_steps: args.check_steps,
                ..TrainConfig::paper(batch)
            };
            nimble_torch::cuda_synchronize()?;
            nimble_torch::cuda_empty_cache()?;
            let measured = training::measure_model(name, &config, &modes).map_err(anyhow::Error::msg).with_context(|| format!("measuring {name} at batch {batch}"))?;
            for row in measured {
                note(&bar, &format!("  {}", train_line(&row)));
                rows.push(row);
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let method = "cuDNN benchmark on; fresh randn inputs and random labels every step; CUDA events around each step on the current stream; each mode timed in its own block on its own model copy; median";
    let record = TrainRecord {
        experiment: "training",
        provenance: Provenance::now(gpu.info(), args.warmup, args.iterations, method),
        libtorch: LIBTORCH_VERSION,
        precision: PRECISION,
        dataset: Dataset::Cifar10,
        optimizer: training::optimizer_label(&config),
        config,
        rows,
    };
    if let Some(path) = args.out {
        write_file(path, &serde_json::to_string_pretty(&record)?)?;
    }
    emit(&train_table(&record))
}

fn train_line(row: &TrainRow) -> String {
    let prepared = row.prepare.as_ref().map_or(String::new(), |p| {
        format!(" | {} streams, {}+{} kernels, prepare {:.2} s", p.streams, p.kernel_nodes, p.backward_kernel_nodes, p.seconds.total)
    });
    let check = row.check.as_ref().map_or(String::new(), |c| {
        format!(", {} step(s) vs eager: updates {:.1e} ({}), losses {:.1e}", c.steps, c.max_update_error, c.variable, c.max_loss_error)
    });
    format!(
        "{:<16} b{:<4} {:<6} {:>8.3} ms (mean {:.3}, sd {:.3}){}{}",
        row.model,
        row.batch,
        row.mode.name(),
        row.step.median_us / 1000.0,
        row.step.mean_us / 1000.0,
        row.step.stdev_us / 1000.0,
        prepared,
        check
    )
}

/// The summary table: one line per model and batch size, ms per step and speedups over eager.
fn train_table(record: &TrainRecord) -> String {
    let p = &record.provenance;
    let mut lines = vec![
        provenance_line(p, record.libtorch, "CIFAR-10 training step"),
        {
            let mut header = format!("{:<16} {:>5}", "model", "batch");
            for mode in TrainMode::ALL {
                header += &format!(" {:>12}", mode.name());
            }
            header + &format!(" {:>9} {:>9} {:>7}", "x nimble", "x step", "streams")
        },
        "(ms per step; x: speedup over eager)".to_string(),
    ];
    let mut keys: Vec<(String, i64)> = Vec::new();
    for row in &record.rows {
        if !keys.contains(&(row.model.clone(), row.batch)) {
            keys.push((row.model.clone(), row.batch));
        }
    }
    for (model, batch) in keys {
        let find = |mode| record.rows.iter().find(|r| r.model == model && r.batch == batch && r.mode == mode);
        let speedup = |mode| match (find(TrainMode::Eager), find(mode)) {
            (Some(e), Some(r)) => format!("{:.2}", e.step.median_us / r.step.median_us),
            _ => "-".into(),
        };
        let streams = find(TrainMode::Step).or(find(TrainMode::Nimble)).and_then(|r| r.prepare.as_ref()).map_or("-".into(), |p| p.streams.to_string());
        let mut line = format!("{:<16} {:>5}", model, batch);
        for mode in TrainMode::ALL {
            line += &format!(" {:>12}", find(mode).map_or("-".to_string(), |r| format!("{:.3}", r.step.median_us / 1000.0)));
        }
        line += &format!(" {:>9} {:>9} {:>7}", speedup(TrainMode::Nimble), speedup(TrainMode::Step), streams);
        lines.push(line);
    }
    lines.join("\n")
}
