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
use tch::{Device, Tensor};

use crate::distributed::{DataParallel, GradientSync};
use crate::error::{NimbleError, Result};
use crate::ffi::{self, CudaGraph, ExternalState, Schedule, TrainState};
use crate::inputs::check_cuda_prepare;
use crate::optimizer::{Optimizer, OptimizerState};
use crate::options::{BackwardStreams, PrepareOptions, PrepareReport, PrepareSeconds};
use crate::output::Layout;
use crate::replay::{Prepared, Replay};
use crate::schedule::{check_capturable, plan_schedule, scheduled_run, time_ops};
use crate::source::{Runner, Source};
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

/// What a whole training step computes after the forward.
#[derive(Clone, Debug)]
pub struct TrainStep {
    pub loss: Loss,
    pub optimizer: Optimizer,
    /// Averages the gradients over the ranks before the optimizer (see [`crate::distributed`]).
    pub data_parallel: Option<DataParallel>,
}

impl TrainStep {
    /// Cross-entropy and `optimizer`, on one GPU.
    pub fn new(optimizer: Optimizer) -> Self {
        TrainStep { loss: Loss::CrossEntropy, optimizer, data_parallel: None }
    }

    /// Makes the step one rank's share of a data-parallel step.
    pub fn data_parallel(mut self, dp: DataParallel) -> Self {
        self.data_parallel = Some(dp);
        self
    }

    /// Replaces the loss.
    pub fn loss(mut self, loss: Loss) -> Self {
        self.loss = loss;
        self
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
    /// How the forward's output is put together around its tensors.
    layout: Layout,
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

    /// The prepared model, with its report.
    fn finish(mut self, mode: &'static str, replay: Replay, layout: Layout, task_graph: TaskGraph, counts: Counts<'_>) -> Prepared {
        let Counts { structure, backward_kernel_nodes, gradient_buckets } = counts;
        self.seconds.total = self.started.elapsed().as_secs_f64();
        let report = PrepareReport {
            mode,
            algorithm: self.plan.algorithm.clone(),
            optimized: false,
            channels_last: false,
            fused_ops: 0,
            host_values_folded: 0,
            frozen_on_host: false,
            ops: self.trace.len(),
            tasks: self.graph.len(),
            edges: self.graph.edge_count(),
            streams: self.plan.streams,
            syncs: self.plan.syncs.len(),
            graph_nodes: structure.node_types.len(),
            kernel_nodes: structure.kernel_count(),
            graph_width: structure.width(),
            backward_kernel_nodes,
            gradient_buckets,
            layout_trial: None,
            seconds: self.seconds,
        };
        Prepared { replay, _schedule: self.schedule, inputs: self.inputs, layout, module: None, trace: self.trace, task_graph, plan: self.plan, report }
    }

    /// Puts back the values the parameters and buffers had before `prepare`.
    fn restore(&self) -> Result<()> {
        put_back(&self.external)?;
        ffi::cuda_synchronize()
    }
}

/// What a report counts in the captured graphs: `structure` is the forward's (autograd mode) or
/// the whole step's graph, `backward_kernel_nodes` the backward graph's kernels (autograd mode)
/// and `gradient_buckets` the data-parallel buckets (step mode).
struct Counts<'a> {
    structure: &'a nimble_cuda::GraphStructure,
    backward_kernel_nodes: usize,
    gradient_buckets: usize,
}

/// Copies the saved values back into the tensors a recorded forward read.
fn put_back(external: &ExternalState) -> Result<()> {
    tch::no_grad(|| {
        for (tensor, value) in &external.saved {
            tensor.shallow_clone().f_copy_(value).map_err(|e| NimbleError::Torch { call: "copy_", message: e.to_string() })?;
        }
        Ok(())
    })
}

/// [`Nimble::training_trace`](crate::Nimble::training_trace): one recorded training forward on
/// any device, the model's parameters and buffers put back afterwards.
pub(crate) fn training_trace(source: &Source, inputs: &[Tensor]) -> Result<Trace> {
    let runner = source.runner(None);
    let (trace, outputs, external) = record_with_state(|| runner.run_structured(inputs, true))?;
    let restored = put_back(&external);
    let (outputs, _) = outputs?;
    restored?;
    check_trainable(&outputs, &external)?;
    Ok(trace)
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
            "the forward reads no parameter that requires gradients, so there is nothing to train (is the VarStore frozen, or do the module's parameters have requires_grad off?)".into(),
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

/// What both modes start with: the checks, one recorded training forward and its plan.
fn training_setup(source: &Source, inputs: &[Tensor], options: &PrepareOptions) -> Result<Setup> {
        let started = Instant::now();
        let mut seconds = PrepareSeconds::default();
        let (device, assigner) = check_cuda_prepare(inputs, options)?;
        if let Some(i) = inputs.iter().position(Tensor::requires_grad) {
            return Err(NimbleError::InvalidInput(format!(
                "input {i} requires gradients; training computes the parameters' gradients only (detach the input)"
            )));
        }
        let inputs: Vec<Tensor> = inputs.iter().map(|t| t.detach().copy()).collect();
        let runner = source.runner(None);
        let step = Instant::now();
        // The first training forward: it records the parameters and buffers before they change.
        let (trace, outputs, external) = record_with_state(|| runner.run_structured(&inputs, true))?;
        let (outputs, layout) = outputs?;
        check_capturable(&trace)?;
        check_trainable(&outputs, &external)?;
        drop(outputs);
        seconds.trace = step.elapsed().as_secs_f64();
        let step = Instant::now();
        let (graph, plan, schedule) = plan_schedule(&trace, assigner.as_ref(), device)?;
        seconds.schedule = step.elapsed().as_secs_f64();
        Ok(Setup { device, inputs, trace, external, graph, plan, schedule, layout, seconds, started })
    }

/// `prepare` with [`PrepareOptions::training`]: see the module documentation.
pub(crate) fn prepare_autograd(source: &Source, inputs: &[Tensor], options: &PrepareOptions) -> Result<Prepared> {
        let mut s = training_setup(source, inputs, options)?;
        let runner = source.runner(None);
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
        let layout = std::mem::replace(&mut s.layout, Layout::of_list(0));
        let state = TrainState::new(&forward_graph, &backward_graph, &outputs, &grad_outputs, &s.external.params, &param_grads)?;
        let replay = Replay::Autograd { state, _outputs: outputs, _grad_outputs: grad_outputs, _forward: forward_graph, _backward: backward_graph };
        Ok(s.finish("autograd", replay, layout, task_graph, Counts { structure: &forward_structure, backward_kernel_nodes: backward_structure.kernel_count(), gradient_buckets: 0 }))
}

/// [`Nimble::prepare_train_step`](crate::Nimble::prepare_train_step): the whole step as one graph.
///
/// Data parallel, each rank first takes rank 0's parameters and buffers; the first warm-up step
/// shows which parameters get gradients, which makes the buckets (checked equal on every rank);
/// from the second warm-up step on, the reducer's hooks launch the all-reduces during the
/// backward, so the pre-run connects NCCL eagerly and the capture records them in the graph.
pub(crate) fn prepare_train_step(source: &Source, inputs: &[Tensor], targets: &Tensor, options: PrepareOptions, step: TrainStep) -> Result<Prepared> {
        let options = PrepareOptions { training: true, ..options };
        step.optimizer.check()?;
        if let Some(dp) = &step.data_parallel {
            dp.check()?;
        }
        let mut s = training_setup(source, inputs, &options)?;
        let device = Device::Cuda(s.device);
        if targets.device() != device {
            return Err(NimbleError::InvalidInput(format!("the targets are on {:?}, expected {device:?} like the inputs", targets.device())));
        }
        if let Some(dp) = &step.data_parallel {
            if dp.comm.device() != s.device {
                return Err(NimbleError::InvalidInput(format!("the inputs are on cuda:{}, but this rank's GPU is cuda:{}; put the model and data there", s.device, dp.comm.device())));
            }
            let values: Vec<Tensor> = s.external.saved.iter().map(|(_, value)| value.shallow_clone()).collect();
            dp.comm.broadcast(&values, 0)?;
            s.restore()?;
        }
        let targets = targets.detach().copy();
        let runner = source.runner(None);
        let mut seconds = std::mem::take(&mut s.seconds);
        let one = s.one_stream(&options);
        let optimizer = OptimizerState::new(&step.optimizer, &s.external.params);
        let params = &s.external.params;
        let sync: std::cell::OnceCell<GradientSync> = std::cell::OnceCell::new();
        let tail = |outputs: Result<Vec<Tensor>>, schedule: Option<&Schedule>| -> Result<Tensor> {
            let outputs = outputs?;
            if let Some(schedule) = schedule {
                schedule.record_on_origin(&outputs)?;
            }
            let loss = step.loss.compute(&outputs, &targets)?;
            if let Some(sync) = sync.get() {
                sync.arm()?;
            }
            // Eager (no schedule), everything runs on the current stream already.
            ffi::backward(std::slice::from_ref(&loss), None, false, schedule.and(one), None)?;
            match sync.get() {
                Some(sync) => {
                    sync.finish()?;
                    // Each bucket's update waits only for its own all-reduce (and the backward),
                    // so the earlier buckets' updates run while the last all-reduces finish.
                    for (bucket, members) in sync.members.iter().enumerate() {
                        sync.wait(bucket)?;
                        optimizer.step_some(params, members)?;
                    }
                    optimizer.step_some(params, &sync.unbucketed)?;
                }
                None => optimizer.step(params)?,
            }
            Ok(loss)
        };
        let result = (|| {
            timed(&mut seconds.warmup, || {
                for _ in 0..2 {
                    ffi::grads_reset(params)?;
                    let _loss = tail(runner.run_caught(&s.inputs, true, "warm-up"), None)?;
                    if let (Some(dp), None) = (&step.data_parallel, sync.get()) {
                        let made = GradientSync::new(dp, params)?;
                        let _ = sync.set(made);
                    }
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
        // The hooks go with the reducer; the graph keeps its all-reduces (and the communicator).
        let buckets = sync.into_inner().map_or(0, |sync| sync.buckets());
        let restored = s.restore();
        optimizer.reset();
        s.seconds = seconds;
        let (task_graph, graph, loss, structure) = result?;
        restored?;
        let comm = step.data_parallel.as_ref().map(|dp| dp.comm.clone());
        let replay = Replay::Step { loss, targets, graph, _optimizer: optimizer, _comm: comm };
        Ok(s.finish("step", replay, Layout::of_list(0), task_graph, Counts { structure: &structure, backward_kernel_nodes: 0, gradient_buckets: buckets }))
}
