//! The training comparison: one training step (forward, cross-entropy, backward, SGD with
//! momentum) of a CIFAR-10 model, measured the paper's way, four ways:
//!
//! * `eager`: tch, as a user writes it (`forward_t`, `cross_entropy_for_logits`, tch's SGD);
//! * `graph`: the whole step as one CUDA graph on one stream (`prepare_train_step` with the
//!   `single` plan), what PyTorch's whole-step CUDA graph is;
//! * `nimble`: the paper's training mode, forward and backward graphs behind autograd
//!   (`prepare` with `PrepareOptions::training`), the loss and tch's SGD eager;
//! * `step`: the whole step as one graph with the forward on Nimble's streams;
//! * `eager-fused` and `nimble-fused`: `eager` and `nimble` with nimble-torch's
//!   `FusedOptimizer` (the same libtorch fused SGD the whole-step graphs run) in place of
//!   tch's SGD, which launches a few kernels per parameter.
//!
//! Method: cuDNN benchmark mode on, fresh standard-normal inputs and uniform random labels for
//! every step, `warmup` untimed steps, then `iterations` steps each timed with CUDA events around
//! the call on the current stream, median reported; each mode in its own block on its own copy
//! of the model. Before timing, every mode trains `check_steps` steps (default 1) from the same
//! weights, data and random seed as a fresh eager copy, and the largest relative difference of
//! the change of any variable (parameters and BatchNorm statistics) is recorded; above
//! [`CHECK_TOLERANCE`] the run fails. Eager is checked against eager too: that is the floor.
//!
//! Why the change over one step, not the variables after many: these deep BatchNorm networks,
//! trained on random data, are chaotic. Two eager runs from the same weights and data already
//! differ by about 1e-3 in the second step's loss (TF32 convolutions, cuDNN's non-deterministic
//! reductions) and by order 1 after a few steps, so a long comparison measures the chaos, not
//! Nimble. nimble-torch's GPU tests compare 20 steps exactly on a small network instead.

use std::panic::{catch_unwind, AssertUnwindSafe};

use nimble_cuda::Samples;
use nimble_torch::distributed::DataParallel;
use nimble_torch::DeviceProfile;
use nimble_torch::{cuda_synchronize, cuda_time, relative_error, BackwardStreams, FusedOptimizer, Nimble, Optimizer, PrepareOptions, PrepareReport, TrainStep};
use serde::Serialize;
use tch::nn::{self, OptimizerConfig};
use tch::{Device, Tensor};

use crate::models::{self, Dataset, Model};
use crate::record::Provenance;

/// Largest relative difference of a variable's change from eager training's that a measured
/// mode may show: about twice the largest the committed record shows (3.8e-3, ResNet-50's
/// `bn1.bias` at batch 64 on the H200: TF32 convolutions and cuDNN's non-deterministic
/// reductions), so a regression several times that fails instead of passing.
pub const CHECK_TOLERANCE: f64 = 8e-3;

/// How one training step is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrainMode {
    Eager,
    EagerFused,
    Graph,
    Nimble,
    NimbleFused,
    Step,
}

impl TrainMode {
    pub const ALL: [TrainMode; 6] = [TrainMode::Eager, TrainMode::EagerFused, TrainMode::Graph, TrainMode::Nimble, TrainMode::NimbleFused, TrainMode::Step];

    pub fn name(self) -> &'static str {
        match self {
            TrainMode::Eager => "eager",
            TrainMode::EagerFused => "eager-fused",
            TrainMode::Graph => "graph",
            TrainMode::Nimble => "nimble",
            TrainMode::NimbleFused => "nimble-fused",
            TrainMode::Step => "step",
        }
    }

    pub fn parse(text: &str) -> Result<TrainMode, String> {
        let names: Vec<&str> = TrainMode::ALL.iter().map(|m| m.name()).collect();
        TrainMode::ALL.into_iter().find(|m| m.name() == text).ok_or_else(|| format!("unknown training mode `{text}`; expected one of {}", names.join(", ")))
    }
}

/// What every run of the experiment shares.
#[derive(Clone, Debug, Serialize)]
pub struct TrainConfig {
    pub batch: i64,
    pub warmup: usize,
    pub iterations: usize,
    /// The forward's algorithm in the `nimble` and `step` modes.
    pub algorithm: String,
    pub backward_streams: BackwardStreams,
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    /// Steps of the check against eager training (0: no check).
    pub check_steps: usize,
}

impl TrainConfig {
    /// The paper's method and a usual CIFAR-10 SGD.
    pub fn paper(batch: i64) -> Self {
        TrainConfig {
            batch,
            warmup: 50,
            iterations: 100,
            algorithm: "nimble".into(),
            backward_streams: BackwardStreams::Forward,
            lr: 0.01,
            momentum: 0.9,
            weight_decay: 5e-4,
            check_steps: 1,
        }
    }

    fn tch_sgd(&self) -> nn::Sgd {
        nn::Sgd { momentum: self.momentum, dampening: 0.0, wd: self.weight_decay, nesterov: false }
    }

    fn optimizer(&self) -> Optimizer {
        Optimizer::sgd(self.lr).momentum(self.momentum).weight_decay(self.weight_decay)
    }
}

/// The result of training a graph mode next to eager tch.
#[derive(Clone, Debug, Serialize)]
pub struct TrainCheck {
    pub steps: usize,
    /// The largest max |Δ − Δeager| / max |Δeager| over the model's variables, where Δ is a
    /// variable's change over the steps, and which variable.
    pub max_update_error: f64,
    pub variable: String,
    /// The largest relative difference of a step's loss.
    pub max_loss_error: f64,
    /// Each step's loss, eager and in the checked mode.
    pub eager_losses: Vec<f64>,
    pub losses: Vec<f64>,
}

/// One measured configuration.
#[derive(Clone, Debug, Serialize)]
pub struct TrainRow {
    pub model: String,
    pub batch: i64,
    pub mode: TrainMode,
    /// Time per training step, microseconds.
    pub step: Samples,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepare: Option<PrepareReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<TrainCheck>,
}

/// A whole comparison, as committed under `paper-figs/results/`.
#[derive(Clone, Debug, Serialize)]
pub struct TrainRecord {
    pub experiment: &'static str,
    pub provenance: Provenance,
    pub libtorch: &'static str,
    pub precision: &'static str,
    pub dataset: Dataset,
    pub optimizer: String,
    pub config: TrainConfig,
    pub rows: Vec<TrainRow>,
}

/// A model and the way it takes a training step.
struct Trainer {
    model: Model,
    run: Run,
}

enum Run {
    Eager(Opt),
    Autograd(Nimble, Opt),
    Step(Nimble),
}

/// The optimizer of the eager and autograd modes.
enum Opt {
    Tch(nn::Optimizer),
    Fused(FusedOptimizer),
}

impl Opt {
    fn zero_grad(&mut self) -> Result<(), String> {
        match self {
            Opt::Tch(opt) => {
                opt.zero_grad();
                Ok(())
            }
            Opt::Fused(opt) => opt.zero_grad().map_err(|e| e.to_string()),
        }
    }

    fn step(&mut self) -> Result<(), String> {
        match self {
            Opt::Tch(opt) => {
                opt.step();
                Ok(())
            }
            Opt::Fused(opt) => opt.step().map_err(|e| e.to_string()),
        }
    }
}

impl Trainer {
    fn new(name: &str, mode: TrainMode, config: &TrainConfig) -> Result<(Trainer, Option<PrepareReport>), String> {
        Trainer::on(name, mode, config, 0, None)
    }

    /// On GPU `device`; the whole-step modes as one rank of `data_parallel` when given.
    fn on(name: &str, mode: TrainMode, config: &TrainConfig, device: usize, data_parallel: Option<DataParallel>) -> Result<(Trainer, Option<PrepareReport>), String> {
        tch::manual_seed(0);
        let mut model = models::build(name, Dataset::Cifar10, Device::Cuda(device))?;
        model.unfreeze();
        let (x, y) = (model.input(config.batch), model.targets(config.batch));
        let sgd = || -> Result<Opt, String> {
            if matches!(mode, TrainMode::EagerFused | TrainMode::NimbleFused) {
                Ok(Opt::Fused(FusedOptimizer::new(model.var_store().trainable_variables(), config.optimizer()).map_err(|e| e.to_string())?))
            } else {
                Ok(Opt::Tch(config.tch_sgd().build(model.var_store(), config.lr).map_err(|e| e.to_string())?))
            }
        };
        let options = PrepareOptions::training().backward_streams(config.backward_streams);
        let failed = |e: nimble_torch::NimbleError| format!("{name}, {} mode: {e}", mode.name());
        let (run, report) = match mode {
            TrainMode::Eager | TrainMode::EagerFused => (Run::Eager(sgd()?), None),
            TrainMode::Nimble | TrainMode::NimbleFused => {
                let mut nimble = model.nimble();
                let report = nimble.prepare(&[x], options.algorithm(config.algorithm.clone())).map_err(failed)?.clone();
                (Run::Autograd(nimble, sgd()?), Some(report))
            }
            TrainMode::Graph | TrainMode::Step => {
                let algorithm = if mode == TrainMode::Graph { "single".to_string() } else { config.algorithm.clone() };
                let mut nimble = model.nimble();
                let mut step = TrainStep::new(config.optimizer());
                if let Some(dp) = data_parallel {
                    step = step.data_parallel(dp);
                }
                let report = nimble.prepare_train_step(&[x], &y, options.algorithm(algorithm), step).map_err(failed)?.clone();
                (Run::Step(nimble), Some(report))
            }
        };
        Ok((Trainer { model, run }, report))
    }

    /// One step; returns the loss tensor.
    fn step(&mut self, x: &Tensor, y: &Tensor) -> Result<Tensor, String> {
        let model = &self.model;
        let eager_loss = |out: &Tensor| catch_unwind(AssertUnwindSafe(|| out.cross_entropy_for_logits(y))).map_err(|_| "the loss failed".to_string());
        match &mut self.run {
            Run::Eager(opt) => {
                let out = catch_unwind(AssertUnwindSafe(|| model.forward_t(x, true))).map_err(|_| "the eager forward failed".to_string())?;
                let loss = eager_loss(&out)?;
                opt.zero_grad()?;
                loss.f_backward().map_err(|e| e.to_string())?;
                opt.step()?;
                Ok(loss)
            }
            Run::Autograd(nimble, opt) => {
                let out = nimble.forward(std::slice::from_ref(x)).map_err(|e| e.to_string())?.remove(0);
                let loss = eager_loss(&out)?;
                opt.zero_grad()?;
                loss.f_backward().map_err(|e| e.to_string())?;
                opt.step()?;
                Ok(loss)
            }
            Run::Step(nimble) => nimble.train_step(std::slice::from_ref(x), y).map_err(|e| e.to_string()),
        }
    }
}

/// Trains `trainer` and an eager copy of the same model side by side on the same data and seed.
///
/// cuDNN's benchmark mode runs every candidate algorithm on the first call of a shape, and that
/// call's result comes from whichever ran, not the one later chosen; with TF32 convolutions the
/// candidates round differently (about 1e-3). So a throw-away eager copy takes two steps first,
/// and both compared runs use the chosen algorithms from their first step.
fn check_against_eager(name: &str, trainer: &mut Trainer, config: &TrainConfig) -> Result<TrainCheck, String> {
    let (mut throwaway, _) = Trainer::new(name, TrainMode::Eager, config)?;
    for _ in 0..2 {
        let _loss = throwaway.step(&throwaway.model.input(config.batch), &throwaway.model.targets(config.batch))?;
    }
    drop(throwaway);
    let (mut eager, _) = Trainer::new(name, TrainMode::Eager, config)?;
    let data: Vec<(Tensor, Tensor)> = (0..config.check_steps).map(|_| (trainer.model.input(config.batch), trainer.model.targets(config.batch))).collect();
    let run = |t: &mut Trainer| -> Result<Vec<f64>, String> {
        tch::manual_seed(7);
        data.iter().map(|(x, y)| t.step(x, y).map(|l| l.double_value(&[]))).collect()
    };
    let snapshot = |t: &Trainer| -> std::collections::HashMap<String, Tensor> { t.model.var_store().variables().into_iter().map(|(k, v)| (k, v.detach().copy())).collect() };
    let before = snapshot(trainer);
    let reference = run(&mut eager)?;
    let losses = run(trainer)?;
    let max_loss_error = losses.iter().zip(&reference).map(|(l, r)| (l - r).abs() / r.abs().max(1e-12)).fold(0.0, f64::max);
    let theirs = trainer.model.var_store().variables();
    let (mut max_update_error, mut variable) = (0.0, String::new());
    for (name, reference) in eager.model.var_store().variables() {
        let start = &before[&name];
        let reference_change = &reference - start;
        if reference_change.abs().max().double_value(&[]) == 0.0 {
            continue; // unchanged in eager (an unused parameter): nothing to compare
        }
        let error = relative_error(&(&theirs[&name] - start), &reference_change);
        if error.is_nan() || error > max_update_error {
            (max_update_error, variable) = (error, name);
        }
    }
    Ok(TrainCheck { steps: config.check_steps, max_update_error, variable, max_loss_error, eager_losses: reference, losses })
}

/// Measures `modes` of model `name` (a CIFAR-10 training model) at `config.batch`.
pub fn measure_model(name: &str, config: &TrainConfig, modes: &[TrainMode]) -> Result<Vec<TrainRow>, String> {
    let mut rows = Vec::new();
    for &mode in modes {
        let (mut trainer, prepare) = Trainer::new(name, mode, config)?;
        // Eager is checked against a second eager copy: how far two eager runs drift apart is
        // the floor for the graph modes' differences.
        let check = if config.check_steps > 0 {
            let check = check_against_eager(name, &mut trainer, config)?;
            let worst = check.max_update_error.max(check.max_loss_error);
            if worst.is_nan() || worst > CHECK_TOLERANCE {
                let first: Vec<String> = check.eager_losses.iter().zip(&check.losses).take(4).map(|(e, l)| format!("{e:.5}/{l:.5}")).collect();
                return Err(format!(
                    "{name} at batch {} ({} mode): over {} steps, training differs from eager tch by {worst:.2e} (relative; variable {}), more than {CHECK_TOLERANCE:.0e}; losses eager/{}: {}",
                    config.batch,
                    mode.name(),
                    check.steps,
                    check.variable,
                    mode.name(),
                    first.join(", ")
                ));
            }
            Some(check)
        } else {
            None
        };
        let step = time_steps(&mut trainer, config)?;
        rows.push(TrainRow { model: name.into(), batch: config.batch, mode, step, prepare, check });
        drop(trainer);
        cuda_synchronize().map_err(|e| e.to_string())?;
        nimble_torch::cuda_empty_cache().map_err(|e| e.to_string())?;
    }
    Ok(rows)
}

/// `config.warmup` untimed steps, then `config.iterations` steps each timed with CUDA events, on
/// fresh random data; microseconds.
fn time_steps(trainer: &mut Trainer, config: &TrainConfig) -> Result<Samples, String> {
    let batch = |t: &Trainer| (t.model.input(config.batch), t.model.targets(config.batch));
    for _ in 0..config.warmup {
        let (x, y) = batch(trainer);
        let _loss = trainer.step(&x, &y)?;
    }
    let mut times = Vec::with_capacity(config.iterations);
    for _ in 0..config.iterations {
        let (x, y) = batch(trainer);
        cuda_synchronize().map_err(|e| e.to_string())?;
        let mut failure = None;
        let ms = cuda_time(|| {
            if let Err(e) = trainer.step(&x, &y) {
                failure = Some(e);
            }
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        if let Some(e) = failure {
            return Err(e);
        }
        times.push(ms * 1000.0);
    }
    Ok(Samples::new(times))
}

/// Steps `measure_rank` profiles when asked.
pub const PROFILED_STEPS: usize = 5;

/// One rank's whole training step (`step` mode, Nimble's streams) of model `name` on GPU
/// `device`, data parallel over `data_parallel` when given: `config.warmup` steps, then
/// `config.iterations` steps timed with CUDA events, the host running ahead as in a training loop
/// (no synchronization between steps: see `nimble_torch::cuda_time_each`), on fresh random
/// inputs and labels for every step, made before the timing starts. No check against eager: data-parallel training is checked
/// against one GPU's by nimble-torch's `data_parallel_gpu` test. With `profile`, then
/// [`PROFILED_STEPS`] more steps run under the device profiler, whose Chrome trace goes there.
pub fn measure_rank(name: &str, config: &TrainConfig, device: usize, data_parallel: Option<DataParallel>, profile: Option<&std::path::Path>) -> Result<RankMeasurement, String> {
    let (mut trainer, prepare) = Trainer::on(name, TrainMode::Step, config, device, data_parallel)?;
    let data: Vec<(Tensor, Tensor)> = (0..config.warmup + config.iterations).map(|_| (trainer.model.input(config.batch), trainer.model.targets(config.batch))).collect();
    for (x, y) in &data[..config.warmup] {
        let _loss = trainer.step(x, y)?;
    }
    cuda_synchronize().map_err(|e| e.to_string())?;
    let timed = &data[config.warmup..];
    let mut failure = None;
    let ms = nimble_torch::cuda_time_each(timed.len(), |i| {
        if let Err(e) = trainer.step(&timed[i].0, &timed[i].1) {
            failure.get_or_insert(e);
        }
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    if let Some(e) = failure {
        return Err(e);
    }
    let profiled = match profile {
        Some(path) => {
            let steps = &data[..PROFILED_STEPS.min(data.len())];
            let run = || -> nimble_torch::Result<Result<(), String>> { Ok(steps.iter().try_for_each(|(x, y)| trainer.step(x, y).map(drop))) };
            let (result, profile) = nimble_torch::profile(Some(path), run).map_err(|e| e.to_string())?;
            result?;
            Some(profile)
        }
        None => None,
    };
    let forward = match &trainer.run {
        Run::Step(nimble) => nimble.task_graph().cloned(),
        _ => None,
    };
    drop(trainer);
    drop(data);
    cuda_synchronize().map_err(|e| e.to_string())?;
    nimble_torch::cuda_empty_cache().map_err(|e| e.to_string())?;
    let step = Samples::new(ms.into_iter().map(|ms| ms * 1000.0).collect());
    let row = TrainRow { model: name.into(), batch: config.batch, mode: TrainMode::Step, step, prepare, check: None };
    Ok(RankMeasurement { row, profile: profiled, forward })
}

/// What [`measure_rank`] gives back.
pub struct RankMeasurement {
    pub row: TrainRow,
    /// The device profile of a few steps, when asked for.
    pub profile: Option<DeviceProfile>,
    /// The prepared forward's task graph: per-op times (events around each op) and the
    /// parameters each op reads, what `scaling_model::project` builds the step from.
    pub forward: Option<nimble_graph::TaskGraph>,
}

/// The optimizer as the record names it.
pub fn optimizer_label(config: &TrainConfig) -> String {
    format!(
        "SGD lr {} momentum {} weight decay {} (tch's in the eager and nimble modes; libtorch's fused SGD in the graph, step and -fused modes)",
        config.lr, config.momentum, config.weight_decay
    )
}
