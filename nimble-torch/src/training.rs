//! Training with Nimble: the paper's autograd mode and the whole-step mode.
//!
//! ```text
//! prepare(inputs, PrepareOptions::training())          autograd mode
//!   trace      one training forward, recording the ops and the parameters and buffers it reads
//!   schedule   the forward's plan, as for inference
//!   warm-up    two eager forward+backward (lazy init, cuDNN's algorithm search)
//!   pre-run    forward on the planned streams, backward on the forward's streams (or one)
//!   capture    the forward graph (multi-stream); then the backward graph, from static gradient
//!              inputs to static gradients of the parameters (autograd's `grad`, `.grad` untouched)
//!   restore    parameters and buffers (BatchNorm statistics) get their values from before
//! forward(inputs)  replays the forward graph inside a custom autograd function; its backward
//!                  copies the incoming gradients in, replays the backward graph and returns the
//!                  parameters' gradients, which autograd accumulates into `.grad`
//!
//! prepare_train_step(inputs, targets, options, step)   whole-step mode
//!   as above, but one graph: forward (multi-stream), loss, backward (gradients made afresh in
//!   the graph's pool), fused optimizer update (libtorch's multi-tensor SGD or Adam kernels)
//! train_step(inputs, targets)  copies in, replays, returns the loss
//! ```
//!
//! Random ops draw fresh numbers on every replay: the capture registers libtorch's CUDA
//! generator, and each replay continues its philox offset exactly where an eager step would.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::time::Instant;

use nimble_graph::TaskGraph;
use nimble_sched::StreamPlan;
use tch::{Device, Kind, Tensor};

use crate::error::{NimbleError, Result};
use crate::ffi::{self, AdamArgs, CudaGraph, ExternalState, Schedule, SgdArgs, TrainState};
use crate::nimble::{
    check_capturable, check_cuda_prepare, copy_into, torchscript_cannot_train, plan_schedule, scheduled_run, time_ops, BackwardStreams, Nimble, PrepareOptions, PrepareReport,
    PrepareSeconds, Prepared, Replay, Runner,
};
use crate::trace::{panic_message, record_with_state, Trace};

/// A loss: the model's outputs and the targets to a scalar tensor.
pub type LossFn = Rc<dyn Fn(&[Tensor], &Tensor) -> Tensor>;

/// The loss of a whole training step.
#[derive(Clone, Default)]
pub enum Loss {
    /// Cross-entropy of the first output (logits) against class-index targets, averaged over the
    /// batch (tch's `cross_entropy_for_logits`).
    #[default]
    CrossEntropy,
    /// Any function of the outputs and the targets to a scalar.
    Custom(LossFn),
}

impl fmt::Debug for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Loss::CrossEntropy => f.write_str("CrossEntropy"),
            Loss::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

impl Loss {
    fn compute(&self, outputs: &[Tensor], targets: &Tensor) -> Result<Tensor> {
        let run = || match self {
            Loss::CrossEntropy => outputs[0].cross_entropy_for_logits(targets),
            Loss::Custom(f) => f(outputs, targets),
        };
        let loss = catch_unwind(AssertUnwindSafe(run)).map_err(|panic| NimbleError::ForwardFailed { pass: "loss", message: panic_message(&panic) })?;
        if loss.numel() != 1 {
            return Err(NimbleError::InvalidInput(format!("the loss has shape {:?}, expected a scalar", loss.size())));
        }
        Ok(loss)
    }
}

/// The optimizer of a whole training step, with PyTorch's (and tch's) semantics, run as
/// libtorch's fused multi-tensor kernels.
#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    Sgd { lr: f64, momentum: f64, dampening: f64, weight_decay: f64, nesterov: bool },
    Adam { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
}

impl Optimizer {
    /// Plain SGD with learning rate `lr` (add momentum and weight decay with the setters).
    pub fn sgd(lr: f64) -> Self {
        Optimizer::Sgd { lr, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false }
    }

    /// Adam with PyTorch's defaults (betas 0.9 and 0.999, eps 1e-8, no weight decay).
    pub fn adam(lr: f64) -> Self {
        Optimizer::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }

    /// SGD's momentum (ignored by Adam).
    pub fn momentum(mut self, value: f64) -> Self {
        if let Optimizer::Sgd { momentum, .. } = &mut self {
            *momentum = value;
        }
        self
    }

    /// SGD's Nesterov momentum (ignored by Adam).
    pub fn nesterov(mut self, on: bool) -> Self {
        if let Optimizer::Sgd { nesterov, .. } = &mut self {
            *nesterov = on;
        }
        self
    }

    /// L2 weight decay, added to the gradient (both optimizers).
    pub fn weight_decay(mut self, value: f64) -> Self {
        match &mut self {
            Optimizer::Sgd { weight_decay, .. } | Optimizer::Adam { weight_decay, .. } => *weight_decay = value,
        }
        self
    }

    fn check(&self) -> Result<()> {
        // False for NaN too.
        let non_negative = |x: f64| x >= 0.0;
        let bad = |what: &str, value: f64, expected: &str| Err(NimbleError::InvalidInput(format!("optimizer {what} is {value}, expected {expected}")));
        match *self {
            Optimizer::Sgd { lr, momentum, dampening, weight_decay, nesterov } => {
                if !non_negative(lr) {
                    return bad("learning rate", lr, "a number ≥ 0");
                }
                if !non_negative(momentum) {
                    return bad("momentum", momentum, "a number ≥ 0");
                }
                if nesterov && (momentum <= 0.0 || dampening != 0.0) {
                    return bad("dampening with Nesterov", dampening, "0, with momentum > 0");
                }
                if dampening != 0.0 {
                    // Momentum buffers start at zero in a captured step; PyTorch's first step
                    // equals that only without dampening.
                    return bad("dampening", dampening, "0 (a captured step starts its momentum buffers at zero)");
                }
                if !non_negative(weight_decay) {
                    return bad("weight decay", weight_decay, "a number ≥ 0");
                }
            }
            Optimizer::Adam { lr, beta1, beta2, eps, weight_decay } => {
                if !non_negative(lr) {
                    return bad("learning rate", lr, "a number ≥ 0");
                }
                if !(0.0..1.0).contains(&beta1) || !(0.0..1.0).contains(&beta2) {
                    return bad("beta", if (0.0..1.0).contains(&beta1) { beta2 } else { beta1 }, "in [0, 1)");
                }
                if !non_negative(eps) || !non_negative(weight_decay) {
                    return bad("eps or weight decay", if eps >= 0.0 { weight_decay } else { eps }, "a number ≥ 0");
                }
            }
        }
        Ok(())
    }
}

/// What a whole training step computes after the forward.
#[derive(Clone, Debug)]
pub struct TrainStep {
    pub loss: Loss,
    pub optimizer: Optimizer,
}

impl TrainStep {
    /// Cross-entropy and `optimizer`.
    pub fn new(optimizer: Optimizer) -> Self {
        TrainStep { loss: Loss::CrossEntropy, optimizer }
    }

    /// Replaces the loss.
    pub fn loss(mut self, loss: Loss) -> Self {
        self.loss = loss;
        self
    }
}

/// An optimizer that runs [`Optimizer`]'s update as libtorch's fused multi-tensor kernels, eagerly:
/// a drop-in for tch's optimizers (which launch a few kernels per parameter) next to the autograd
/// mode, where the optimizer is the largest eager cost left.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let vs = tch::nn::VarStore::new(tch::Device::Cuda(0));
/// # let loss = tch::Tensor::zeros([], (tch::Kind::Float, tch::Device::Cuda(0)));
/// use nimble_torch::{FusedOptimizer, Optimizer};
/// let mut opt = FusedOptimizer::new(vs.trainable_variables(), Optimizer::sgd(0.01).momentum(0.9))?;
/// opt.zero_grad()?;
/// loss.backward();
/// opt.step()?;
/// # Ok(()) }
/// ```
pub struct FusedOptimizer {
    params: Vec<Tensor>,
    state: OptimizerState,
}

impl FusedOptimizer {
    /// Over `params` (all on one device, float32); the state starts as PyTorch's does.
    pub fn new(params: Vec<Tensor>, optimizer: Optimizer) -> Result<FusedOptimizer> {
        optimizer.check()?;
        if let Some(first) = params.first() {
            if let Some(i) = params.iter().position(|p| p.device() != first.device() || p.kind() != first.kind()) {
                return Err(NimbleError::InvalidInput(format!(
                    "parameter {i} is {:?} on {:?}, expected {:?} on {:?} like parameter 0 (the fused kernels take one device and dtype)",
                    params[i].kind(),
                    params[i].device(),
                    first.kind(),
                    first.device()
                )));
            }
        }
        let state = OptimizerState::new(&optimizer, &params);
        Ok(FusedOptimizer { params, state })
    }

    /// One update of every parameter that has a gradient.
    pub fn step(&mut self) -> Result<()> {
        self.state.step(&self.params)
    }

    /// Sets the gradients to none (as PyTorch's and libtorch's `zero_grad` do by default).
    pub fn zero_grad(&mut self) -> Result<()> {
        ffi::grads_reset(&self.params)
    }
}

/// The optimizer's state tensors, allocated once so a captured step updates them in place.
pub(crate) enum OptimizerState {
    Sgd { args: SgdArgs, buffers: Vec<Tensor> },
    Adam { args: AdamArgs, exp_avgs: Vec<Tensor>, exp_avg_sqs: Vec<Tensor>, steps: Vec<Tensor> },
}

impl OptimizerState {
    fn new(optimizer: &Optimizer, params: &[Tensor]) -> OptimizerState {
        let zeros = || params.iter().map(Tensor::zeros_like).collect::<Vec<_>>();
        match *optimizer {
            Optimizer::Sgd { lr, momentum, dampening, weight_decay, nesterov } => OptimizerState::Sgd {
                args: SgdArgs { lr, momentum, dampening, weight_decay, nesterov },
                buffers: if momentum != 0.0 { zeros() } else { Vec::new() },
            },
            Optimizer::Adam { lr, beta1, beta2, eps, weight_decay } => OptimizerState::Adam {
                args: AdamArgs { lr, beta1, beta2, eps, weight_decay },
                exp_avgs: zeros(),
                exp_avg_sqs: zeros(),
                steps: params.iter().map(|p| Tensor::zeros([], (Kind::Float, p.device()))).collect(),
            },
        }
    }

    fn step(&self, params: &[Tensor]) -> Result<()> {
        match self {
            OptimizerState::Sgd { args, buffers } => ffi::sgd_step(params, buffers, args),
            OptimizerState::Adam { args, exp_avgs, exp_avg_sqs, steps } => ffi::adam_step(params, exp_avgs, exp_avg_sqs, steps, args),
        }
    }

    /// Back to the state before any step.
    fn reset(&self) {
        let all: Vec<&Tensor> = match self {
            OptimizerState::Sgd { buffers, .. } => buffers.iter().collect(),
            OptimizerState::Adam { exp_avgs, exp_avg_sqs, steps, .. } => exp_avgs.iter().chain(exp_avg_sqs).chain(steps).collect(),
        };
        tch::no_grad(|| {
            for t in all {
                let _ = t.shallow_clone().zero_();
            }
        });
    }
}

/// What both training modes prepare first: the trace of a training forward, the state it reads,
/// and the forward's plan.
struct Setup {
    device: usize,
    inputs: Vec<Tensor>,
    trace: Trace,
    external: ExternalState,
    graph: TaskGraph,
    plan: StreamPlan,
    schedule: Schedule,
    seconds: PrepareSeconds,
    started: Instant,
}

impl Setup {
    /// The schedule whose origin stream a one-stream backward uses.
    fn one_stream<'a>(&'a self, options: &PrepareOptions) -> Option<&'a Schedule> {
        (options.backward_streams == BackwardStreams::One).then_some(&self.schedule)
    }

    /// The forward's task graph with each op's GPU time (when the options ask for it).
    fn time_ops(&self, options: &PrepareOptions, runner: &Runner<'_>) -> Result<TaskGraph> {
        time_ops(&self.trace, &self.graph, self.device, options.measure_durations, runner, &self.inputs, true)
    }

    /// The prepared model, with its report; `structure` is the (forward or whole-step) graph's.
    fn finish(mut self, mode: &'static str, replay: Replay, task_graph: TaskGraph, structure: &nimble_cuda::GraphStructure, backward_kernel_nodes: usize) -> Prepared {
        self.seconds.total = self.started.elapsed().as_secs_f64();
        let report = PrepareReport {
            mode,
            algorithm: self.plan.algorithm.clone(),
            optimized: false,
            channels_last: false,
            fused_ops: 0,
            ops: self.trace.len(),
            tasks: self.graph.len(),
            edges: self.graph.edge_count(),
            streams: self.plan.streams,
            syncs: self.plan.syncs.len(),
            graph_nodes: structure.node_types.len(),
            kernel_nodes: structure.kernel_count(),
            graph_width: structure.width(),
            backward_kernel_nodes,
            layout_trial: None,
            seconds: self.seconds,
        };
        Prepared { replay, _schedule: self.schedule, inputs: self.inputs, optimized: None, trace: self.trace, task_graph, plan: self.plan, report }
    }

    /// Puts back the values the parameters and buffers had before `prepare`.
    fn restore(&self) -> Result<()> {
        tch::no_grad(|| {
            for (tensor, value) in &self.external.saved {
                tensor.shallow_clone().f_copy_(value).map_err(|e| NimbleError::Torch { call: "copy_", message: e.to_string() })?;
            }
            Ok::<_, NimbleError>(())
        })?;
        ffi::cuda_synchronize()
    }
}

/// Runs `f`, setting `slot` to its wall-clock seconds.
fn timed<T>(slot: &mut f64, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let started = Instant::now();
    let result = f();
    *slot = started.elapsed().as_secs_f64();
    result
}

/// Gradients of ones for each output (what a warm-up backward starts from).
fn ones_for(outputs: &[Tensor]) -> Vec<Tensor> {
    outputs.iter().map(Tensor::ones_like).collect()
}

fn check_trainable(outputs: &[Tensor], external: &ExternalState) -> Result<()> {
    if external.params.is_empty() || !outputs.iter().any(Tensor::requires_grad) {
        return Err(NimbleError::InvalidInput(
            "the forward reads no parameter that requires gradients, so there is nothing to train (is the VarStore frozen?)".into(),
        ));
    }
    if let Some(i) = outputs.iter().position(|o| !o.is_floating_point()) {
        return Err(NimbleError::InvalidInput(format!("forward output {i} is not floating-point, so it has no gradient; return only differentiable outputs")));
    }
    Ok(())
}

/// Turns a pass's op-sequence problem into the crate's error.
fn passed<T>(result: std::result::Result<Result<T>, String>, pass: &'static str) -> Result<T> {
    match result {
        Ok(value) => value,
        Err(problem) => Err(NimbleError::OpMismatch { pass, detail: problem }),
    }
}

impl Nimble {
    fn training_setup(&self, inputs: &[Tensor], options: &PrepareOptions) -> Result<Setup> {
        let started = Instant::now();
        let mut seconds = PrepareSeconds::default();
        let (device, assigner) = check_cuda_prepare(inputs, options)?;
        if let Some(i) = inputs.iter().position(Tensor::requires_grad) {
            return Err(NimbleError::InvalidInput(format!(
                "input {i} requires gradients; training computes the parameters' gradients only (detach the input)"
            )));
        }
        let inputs: Vec<Tensor> = inputs.iter().map(|t| t.detach().copy()).collect();
        let runner = self.runner(None);
        if let Runner::Jit(_) = runner {
            return Err(torchscript_cannot_train());
        }
        let step = Instant::now();
        // The first training forward: it records the parameters and buffers before they change.
        let (trace, outputs, external) = record_with_state(|| runner.run(&inputs, true))?;
        let outputs = outputs?;
        check_capturable(&trace)?;
        check_trainable(&outputs, &external)?;
        drop(outputs);
        seconds.trace = step.elapsed().as_secs_f64();
        let step = Instant::now();
        let (graph, plan, schedule) = plan_schedule(&trace, assigner.as_ref(), device)?;
        seconds.schedule = step.elapsed().as_secs_f64();
        Ok(Setup { device, inputs, trace, external, graph, plan, schedule, seconds, started })
    }

    /// `prepare` with [`PrepareOptions::training`]: see the module documentation.
    pub(crate) fn prepare_autograd(&mut self, inputs: &[Tensor], options: &PrepareOptions) -> Result<&PrepareReport> {
        let mut s = self.training_setup(inputs, options)?;
        let runner = self.runner(None);
        let mut seconds = std::mem::take(&mut s.seconds);
        let one = s.one_stream(options);
        let params = &s.external.params;
        let result = (|| {
            timed(&mut seconds.warmup, || {
                for _ in 0..2 {
                    let outputs = runner.run_caught(&s.inputs, true, "warm-up")?;
                    ffi::backward(&outputs, Some(&ones_for(&outputs)), false, None, Some(params))?;
                }
                ffi::cuda_synchronize()
            })?;
            let task_graph = timed(&mut seconds.time_ops, || s.time_ops(options, &runner))?;

            let step = Instant::now();
            ffi::fresh_grad_accumulators(params)?;
            let pre = s.schedule.pass_with_tail(None, 0, true, || runner.run_caught(&s.inputs, true, "pre-run"), |outputs| {
                let outputs = outputs?;
                ffi::backward(&outputs, Some(&ones_for(&outputs)), false, one, Some(params))
            })?;
            passed(pre, "pre-run")?;
            ffi::cuda_synchronize()?;
            seconds.prerun = step.elapsed().as_secs_f64();

            let step = Instant::now();
            ffi::fresh_grad_accumulators(params)?;
            let forward_graph = CudaGraph::new()?;
            let outputs = scheduled_run(&s.schedule, Some((&forward_graph, options.capture_mode)), 0, &runner, &s.inputs, true, "capture")?;
            let grad_outputs: Vec<Tensor> = outputs.iter().map(Tensor::zeros_like).collect();
            let backward_graph = CudaGraph::new()?;
            // The parameters' gradients land in the backward graph's own tensors; autograd
            // accumulates them into `.grad` (see the shim's ReplayFn).
            let captured = s.schedule.pass_with_tail(Some((&backward_graph, options.capture_mode)), 0, false, || (), |()| {
                ffi::backward(&outputs, Some(&grad_outputs), true, one, Some(params))
            })?;
            let param_grads = passed(captured, "backward capture")?;
            forward_graph.instantiate()?;
            backward_graph.instantiate()?;
            let forward_structure = forward_graph.structure()?;
            let backward_structure = backward_graph.structure()?;
            seconds.capture = step.elapsed().as_secs_f64();
            Ok::<_, NimbleError>((task_graph, forward_graph, backward_graph, outputs, grad_outputs, param_grads, forward_structure, backward_structure))
        })();
        // Whatever happened, the model keeps the values it had.
        let restored = s.restore();
        s.seconds = seconds;
        let (task_graph, forward_graph, backward_graph, outputs, grad_outputs, param_grads, forward_structure, backward_structure) = result?;
        restored?;
        // The captured forward's autograd graph is not needed any more (the backward graph has
        // its kernels); keeping it would keep its gradient accumulators on the capture's streams.
        let outputs: Vec<Tensor> = outputs.iter().map(Tensor::detach).collect();
        let state = TrainState::new(&forward_graph, &backward_graph, &outputs, &grad_outputs, &s.external.params, &param_grads)?;
        let replay = Replay::Autograd { state, _outputs: outputs, _grad_outputs: grad_outputs, _forward: forward_graph, _backward: backward_graph };
        let prepared = self.prepared.insert(s.finish("autograd", replay, task_graph, &forward_structure, backward_structure.kernel_count()));
        Ok(&prepared.report)
    }

    /// Prepares the whole training step as one CUDA graph: the forward on the plan's streams,
    /// then `step`'s loss against `targets`, the backward (one stream, or the forward's) and the
    /// optimizer update. `inputs` and `targets` give the shapes (their values do not matter);
    /// the model's parameters and buffers keep their values. Then [`Nimble::train_step`] runs
    /// one step per call.
    ///
    /// The learning rate and other hyper-parameters are part of the graph: prepare again to
    /// change them.
    pub fn prepare_train_step(&mut self, inputs: &[Tensor], targets: &Tensor, options: PrepareOptions, step: TrainStep) -> Result<&PrepareReport> {
        self.prepared = None;
        let options = PrepareOptions { training: true, ..options };
        step.optimizer.check()?;
        let mut s = self.training_setup(inputs, &options)?;
        let device = Device::Cuda(s.device);
        if targets.device() != device {
            return Err(NimbleError::InvalidInput(format!("the targets are on {:?}, expected {device:?} like the inputs", targets.device())));
        }
        let targets = targets.detach().copy();
        let runner = self.runner(None);
        let mut seconds = std::mem::take(&mut s.seconds);
        let one = s.one_stream(&options);
        let optimizer = OptimizerState::new(&step.optimizer, &s.external.params);
        let params = &s.external.params;
        let tail = |outputs: Result<Vec<Tensor>>, schedule: Option<&Schedule>| -> Result<Tensor> {
            let outputs = outputs?;
            if let Some(schedule) = schedule {
                schedule.record_on_origin(&outputs)?;
            }
            let loss = step.loss.compute(&outputs, &targets)?;
            // Eager (no schedule), everything runs on the current stream already.
            ffi::backward(std::slice::from_ref(&loss), None, false, schedule.and(one), None)?;
            optimizer.step(params)?;
            Ok(loss)
        };
        let result = (|| {
            timed(&mut seconds.warmup, || {
                for _ in 0..2 {
                    ffi::grads_reset(params)?;
                    let _loss = tail(runner.run_caught(&s.inputs, true, "warm-up"), None)?;
                }
                ffi::cuda_synchronize()
            })?;
            let task_graph = timed(&mut seconds.time_ops, || s.time_ops(&options, &runner))?;

            let started = Instant::now();
            ffi::grads_reset(params)?;
            ffi::fresh_grad_accumulators(params)?;
            let pre = s.schedule.pass_with_tail(None, 0, true, || runner.run_caught(&s.inputs, true, "pre-run"), |o| tail(o, Some(&s.schedule)))?;
            let _loss = passed(pre, "pre-run")?;
            ffi::cuda_synchronize()?;
            seconds.prerun = started.elapsed().as_secs_f64();

            let started = Instant::now();
            // Gradients are made afresh inside the graph (its pool), so nothing needs zeroing.
            ffi::grads_reset(params)?;
            ffi::fresh_grad_accumulators(params)?;
            let graph = CudaGraph::new()?;
            let captured = s.schedule.pass_with_tail(
                Some((&graph, options.capture_mode)),
                0,
                true,
                || runner.run_caught(&s.inputs, true, "capture"),
                |o| tail(o, Some(&s.schedule)),
            )?;
            let loss = passed(captured, "capture")?;
            graph.instantiate()?;
            let structure = graph.structure()?;
            seconds.capture = started.elapsed().as_secs_f64();
            Ok::<_, NimbleError>((task_graph, graph, loss, structure))
        })();
        let restored = s.restore();
        optimizer.reset();
        s.seconds = seconds;
        let (task_graph, graph, loss, structure) = result?;
        restored?;
        let replay = Replay::Step { loss, targets, graph, _optimizer: optimizer };
        let prepared = self.prepared.insert(s.finish("step", replay, task_graph, &structure, 0));
        Ok(&prepared.report)
    }

    /// One training step (forward, loss, backward, optimizer update) on `inputs` and `targets`,
    /// replayed from the graph [`Nimble::prepare_train_step`] captured. Returns the loss (a
    /// tensor of the graph that the next step overwrites: copy it to keep it).
    pub fn train_step(&self, inputs: &[Tensor], targets: &Tensor) -> Result<Tensor> {
        let prepared = self.prepared.as_ref().ok_or(NimbleError::NotPrepared)?;
        let Replay::Step { loss, targets: static_targets, graph, .. } = &prepared.replay else {
            return Err(NimbleError::Training("train_step needs a model prepared with prepare_train_step".into()));
        };
        copy_into(&prepared.inputs, inputs)?;
        if targets.size() != static_targets.size() || targets.kind() != static_targets.kind() || targets.device() != static_targets.device() {
            return Err(NimbleError::InvalidInput(format!(
                "train_step targets are {:?} {:?} on {:?}, expected {:?} {:?} on {:?} (as at prepare)",
                targets.kind(),
                targets.size(),
                targets.device(),
                static_targets.kind(),
                static_targets.size(),
                static_targets.device()
            )));
        }
        static_targets.shallow_clone().f_copy_(targets).map_err(|e| NimbleError::Torch { call: "copy_", message: e.to_string() })?;
        graph.replay()?;
        Ok(loss.shallow_clone())
    }
}
