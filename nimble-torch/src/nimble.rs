//! `Nimble`: prepare a model once (trace, optimize, schedule, pre-run, capture), then replay it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::Instant;

use nimble_cuda::CaptureMode;
use nimble_graph::TaskGraph;
use nimble_sched::{algorithms, Analysis, StreamPlan};
use serde::Serialize;
use tch::nn::ModuleT;
use tch::{Device, Tensor};

use crate::error::{NimbleError, Result};
use crate::ffi::{self, Applied, CudaGraph, JitModule, Rewrites, Schedule, ScheduleSpec, TrainState};
use crate::trace::{panic_message, record, Trace};
use crate::training::OptimizerState;

/// How long the timing pass holds its stream before the ops (GPU clock cycles, about 50 ms on
/// current GPUs), so all ops are queued when they run and their events time the GPU alone.
const TIMING_GATE_CYCLES: i64 = 100_000_000;

/// Which streams the backward of a training-prepared model runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackwardStreams {
    /// Every backward op on one stream, as the paper did.
    One,
    /// Each backward op on its forward op's planned stream, as libtorch's autograd engine does by
    /// itself, with the engine's syncs between them. The default: on the H200 it made
    /// ResNet-50's whole training step 1.4–3.5% faster than one stream (batch 32–128,
    /// `paper-figs/results/training-resnet50-backward-streams.txt`), and it is the same plan on
    /// models whose forward has one stream.
    Forward,
}

/// What `prepare` does.
#[derive(Clone, Debug, PartialEq)]
pub struct PrepareOptions {
    /// The stream-assignment algorithm, by its nimble-sched registry name (`nimble`, `single`
    /// for the paper's single-stream Nimble, `round-robin:4`, …).
    pub algorithm: String,
    /// Apply the inference rewrites first: the forward is traced into TorchScript, frozen,
    /// BatchNorm folded into convolutions, `x * sigmoid(x)` made one SiLU, and on CUDA
    /// `fuse_conv_relu` and `channels_last` applied. The model's parameters must not require
    /// gradients (freeze its `VarStore`).
    pub optimize: bool,
    /// With `optimize` on CUDA: fuse convolution(+add)+ReLU into cuDNN's fused kernels.
    pub fuse_conv_relu: bool,
    /// With `optimize`: replace squeeze-and-excitation blocks (pool, 1×1 convolution, SiLU or
    /// ReLU, 1×1 convolution, sigmoid, scale) and convolutions followed by SiLU, ReLU, ReLU6 or
    /// a residual add with Nimble's fused ops (`nimble::squeeze_excite`,
    /// `nimble::conv2d_fused`), whose CUDA kernels do in one pass what ATen does in several.
    pub fuse_kernels: bool,
    /// With `optimize` on CUDA: keep convolution weights and 4-D inputs channels-last (NHWC),
    /// so cuDNN needs no layout transforms (inductor's layout optimization does the same).
    /// `None` (the default) decides per model: on when it has no grouped (depthwise)
    /// convolutions; with them, neither layout wins everywhere (cuDNN's grouped kernels differ
    /// by layout), so `prepare` builds both, times 60 replays of each, and keeps the faster
    /// (`PrepareReport::layout_trial`). Values are unchanged; outputs keep the layout the model
    /// gives them.
    pub channels_last: Option<bool>,
    /// How strictly CUDA polices other calls while capturing.
    pub capture_mode: CaptureMode,
    /// Turn on cuDNN's benchmark mode (algorithm search in the pre-run), as the paper measured.
    pub cudnn_benchmark: bool,
    /// Time each op on the GPU (one extra pass), for `task_graph`'s `duration_us`.
    pub measure_durations: bool,
    /// Prepare for training (`prepare` captures a forward and a backward graph behind a custom
    /// autograd function; `prepare_train_step` the whole step): the forward runs with
    /// `train = true` and gradients on.
    pub training: bool,
    /// With `training`: where the backward's ops run.
    pub backward_streams: BackwardStreams,
}

impl PrepareOptions {
    /// Inference with Nimble's defaults: the `nimble` algorithm, the inference rewrites,
    /// thread-local capture, cuDNN benchmark on, op durations measured.
    pub fn inference() -> Self {
        PrepareOptions {
            algorithm: "nimble".into(),
            optimize: true,
            fuse_conv_relu: true,
            fuse_kernels: true,
            channels_last: None,
            capture_mode: CaptureMode::ThreadLocal,
            cudnn_benchmark: true,
            measure_durations: true,
            training: false,
            backward_streams: BackwardStreams::One,
        }
    }

    /// Training with Nimble's defaults: the `nimble` algorithm for the forward, each backward op
    /// on its forward op's stream ([`BackwardStreams::Forward`]; the paper used one stream), no
    /// inference rewrites, thread-local capture, cuDNN benchmark on. Use with `prepare`
    /// (autograd mode) or `prepare_train_step` (whole step).
    pub fn training() -> Self {
        PrepareOptions { optimize: false, training: true, backward_streams: BackwardStreams::Forward, ..PrepareOptions::inference() }
    }

    /// Picks the streams of the backward (training).
    pub fn backward_streams(mut self, streams: BackwardStreams) -> Self {
        self.backward_streams = streams;
        self
    }

    /// Picks the stream-assignment algorithm by registry name.
    pub fn algorithm(mut self, name: impl Into<String>) -> Self {
        self.algorithm = name.into();
        self
    }

    /// Turns the inference rewrites on or off.
    pub fn optimize(mut self, on: bool) -> Self {
        self.optimize = on;
        self
    }

    /// Turns conv(+add)+ReLU fusion on or off (with `optimize`).
    pub fn fuse_conv_relu(mut self, on: bool) -> Self {
        self.fuse_conv_relu = on;
        self
    }

    /// Turns Nimble's fused kernels on or off (with `optimize`).
    pub fn fuse_kernels(mut self, on: bool) -> Self {
        self.fuse_kernels = on;
        self
    }

    pub(crate) fn rewrites(&self) -> Rewrites {
        Rewrites { fuse_conv_relu: self.fuse_conv_relu, fuse_kernels: self.fuse_kernels, channels_last: self.channels_last }
    }

    /// Forces the channels-last layout on or off (with `optimize`), or (`None`) lets the model
    /// decide.
    pub fn channels_last(mut self, on: Option<bool>) -> Self {
        self.channels_last = on;
        self
    }

    /// Picks the capture mode.
    pub fn capture_mode(mut self, mode: CaptureMode) -> Self {
        self.capture_mode = mode;
        self
    }

    /// Turns the per-op timing pass on or off.
    pub fn measure_durations(mut self, on: bool) -> Self {
        self.measure_durations = on;
        self
    }
}

/// What `prepare` found and built.
#[derive(Clone, Debug, Serialize)]
pub struct PrepareReport {
    /// `inference`, `autograd` (forward and backward graphs behind autograd) or `step` (the
    /// whole training step as one graph).
    pub mode: &'static str,
    pub algorithm: String,
    pub optimized: bool,
    /// The channels-last layout was applied.
    pub channels_last: bool,
    /// Nimble's fused ops in the optimized forward (`PrepareOptions::fuse_kernels`).
    pub fused_ops: usize,
    /// Top-level ops of one forward.
    pub ops: usize,
    /// Ops in the task graph (see `Trace::task_ops`: views and CPU-only ops are left out).
    pub tasks: usize,
    pub edges: usize,
    pub streams: usize,
    pub syncs: usize,
    /// Nodes of the captured CUDA graph, all kinds, and kernel nodes among them.
    pub graph_nodes: usize,
    pub kernel_nodes: usize,
    /// Largest set of captured nodes no dependency path joins.
    pub graph_width: usize,
    /// Kernel nodes of the backward graph (autograd mode; 0 otherwise).
    pub backward_kernel_nodes: usize,
    /// When the layout was chosen by timing both (see `PrepareOptions::channels_last`).
    pub layout_trial: Option<LayoutTrial>,
    /// Wall-clock seconds per step, and in all.
    pub seconds: PrepareSeconds,
}

/// The two layouts' replay times, median microseconds, from which `prepare` chose.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LayoutTrial {
    pub nchw_us: f64,
    pub nhwc_us: f64,
}

/// The layout trial: per layout, `rounds` blocks of `warmup` untimed and `timed` timed replays,
/// the layouts' blocks alternating.
struct TrialBlocks {
    rounds: usize,
    warmup: usize,
    timed: usize,
}
const LAYOUT_TRIAL: TrialBlocks = TrialBlocks { rounds: 3, warmup: 10, timed: 20 };

/// Wall-clock seconds of each step of `prepare`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PrepareSeconds {
    pub optimize: f64,
    pub warmup: f64,
    pub trace: f64,
    pub schedule: f64,
    pub time_ops: f64,
    pub prerun: f64,
    pub capture: f64,
    /// Preparing the other layout and timing both (`layout_trial`); 0 without a trial.
    pub layout_trial: f64,
    pub total: f64,
}

/// The rewrites of `trace` and `run_optimized`: those prepare applies by default, less cuDNN's
/// fusions and the channels-last layout (CUDA-only choices that change no op's meaning).
const TRACE_REWRITES: Rewrites = Rewrites { fuse_conv_relu: false, fuse_kernels: true, channels_last: Some(false) };

/// A forward of tensors to tensors; the flag is tch's `train`.
type ForwardFn = Box<dyn Fn(&[Tensor], bool) -> Vec<Tensor>>;

pub(crate) enum Source {
    Rust(ForwardFn),
    TorchScript(JitModule),
}

/// Training needs the forward as Rust code: a TorchScript module runs under `no_grad` here.
pub(crate) fn torchscript_cannot_train() -> NimbleError {
    NimbleError::InvalidInput("training needs a tch model or function; TorchScript modules are prepared for inference only".into())
}

/// What runs the forward after `prepare`'s optimization step.
pub(crate) enum Runner<'a> {
    Rust(&'a ForwardFn),
    Jit(&'a JitModule),
}

impl Runner<'_> {
    /// Runs for inference (gradients off, `train = false`) or, with `train`, for training
    /// (gradients on, `train = true`).
    pub(crate) fn run(&self, inputs: &[Tensor], train: bool) -> Result<Vec<Tensor>> {
        match (self, train) {
            (Runner::Rust(f), false) => tch::no_grad(|| Ok(f(inputs, false))),
            (Runner::Rust(f), true) => tch::with_grad(|| Ok(f(inputs, true))),
            (Runner::Jit(m), false) => tch::no_grad(|| m.forward(inputs)),
            (Runner::Jit(_), true) => Err(torchscript_cannot_train()),
        }
    }

    /// Runs, turning a panic (tch's way to report libtorch errors) into an error.
    pub(crate) fn run_caught(&self, inputs: &[Tensor], train: bool, pass: &'static str) -> Result<Vec<Tensor>> {
        match catch_unwind(AssertUnwindSafe(|| self.run(inputs, train))) {
            Ok(result) => result,
            Err(panic) => Err(NimbleError::ForwardFailed { pass, message: panic_message(&panic) }),
        }
    }
}

/// What a prepared model replays.
pub(crate) enum Replay {
    Inference {
        // Field order is drop order: the outputs live in the graph's pool.
        outputs: Vec<Tensor>,
        graph: CudaGraph,
    },
    Autograd {
        // Released first, so outputs still held by the caller refuse their backward.
        state: TrainState,
        _outputs: Vec<Tensor>,
        _grad_outputs: Vec<Tensor>,
        _forward: CudaGraph,
        _backward: CudaGraph,
    },
    Step {
        loss: Tensor,
        targets: Tensor,
        graph: CudaGraph,
        _optimizer: OptimizerState,
    },
}

pub(crate) struct Prepared {
    pub(crate) replay: Replay,
    pub(crate) _schedule: Schedule,
    pub(crate) inputs: Vec<Tensor>,
    pub(crate) optimized: Option<JitModule>,
    pub(crate) trace: Trace,
    pub(crate) task_graph: TaskGraph,
    pub(crate) plan: StreamPlan,
    pub(crate) report: PrepareReport,
}

/// A model run the Nimble way: prepared once, then replayed as one multi-stream CUDA graph.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use nimble_torch::{Nimble, PrepareOptions};
/// use tch::{nn, Device, Kind, Tensor};
/// let mut vs = nn::VarStore::new(Device::Cuda(0));
/// let model = tch::vision::resnet::resnet50(&vs.root(), 1000);
/// vs.freeze(); // the inference rewrites need parameters without gradients
/// let mut nimble = Nimble::new(model);
/// let dummy = Tensor::randn([1, 3, 224, 224], (Kind::Float, Device::Cuda(0)));
/// nimble.prepare(&[dummy], PrepareOptions::inference())?;
/// let input = Tensor::randn([1, 3, 224, 224], (Kind::Float, Device::Cuda(0)));
/// let out = nimble.forward(&[input])?; // overwritten by the next forward: copy to keep it
/// # Ok(()) }
/// ```
pub struct Nimble {
    // Dropped first: the prepared graph before the model it came from.
    pub(crate) prepared: Option<Prepared>,
    pub(crate) source: Source,
}

impl Nimble {
    /// Wraps a tch module taking one input tensor (run with `train = false`, or `true` when
    /// prepared for training).
    pub fn new<M: ModuleT + 'static>(model: M) -> Nimble {
        Nimble::from_fn_t(move |xs: &[Tensor], train| vec![model.forward_t(&xs[0], train)])
    }

    /// Wraps any function of tensors to tensors.
    pub fn from_fn(forward: impl Fn(&[Tensor]) -> Vec<Tensor> + 'static) -> Nimble {
        Nimble::from_fn_t(move |xs: &[Tensor], _| forward(xs))
    }

    /// Wraps a function of tensors to tensors that takes tch's `train` flag.
    pub fn from_fn_t(forward: impl Fn(&[Tensor], bool) -> Vec<Tensor> + 'static) -> Nimble {
        Nimble { prepared: None, source: Source::Rust(Box::new(forward)) }
    }

    /// Loads a `torch.jit.save`d TorchScript module onto `device`.
    pub fn from_torchscript(path: impl AsRef<Path>, device: Device) -> Result<Nimble> {
        let device = match device {
            Device::Cpu => None,
            Device::Cuda(i) => Some(i),
            other => return Err(NimbleError::InvalidInput(format!("device {other:?} is not supported, expected cpu or cuda"))),
        };
        Ok(Nimble { prepared: None, source: Source::TorchScript(JitModule::load(path.as_ref(), device)?) })
    }

    /// Records one forward on `inputs` (any device, CPU included) without preparing anything:
    /// the trace, after the inference rewrites when `optimize` (BatchNorm folding, SiLU and
    /// Nimble's fused ops; cuDNN's fusions and the channels-last layout are left to `prepare`).
    pub fn trace(&self, inputs: &[Tensor], optimize: bool) -> Result<Trace> {
        check_inputs_given(inputs)?;
        let optimized = if optimize { Some(self.optimized_module(inputs, &TRACE_REWRITES)?.0) } else { None };
        let runner = self.runner(optimized.as_ref());
        runner.run_caught(inputs, false, "warm-up")?;
        let (trace, outputs) = record(|| runner.run(inputs, false))?;
        outputs?;
        // A second run must issue the same ops, or the model is not static.
        scheduled_run(&single_stream_schedule(&trace, None, false)?, None, 0, &runner, inputs, false, "check")?;
        Ok(trace)
    }

    /// Runs the forward once, eagerly (any device, CPU included), after the inference rewrites
    /// that `trace(inputs, true)` records: a way to check what the rewrites compute, Nimble's
    /// fused ops included, against the model itself.
    pub fn run_optimized(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        check_inputs_given(inputs)?;
        let (module, _) = self.optimized_module(inputs, &TRACE_REWRITES)?;
        Runner::Jit(&module).run_caught(inputs, false, "optimized forward")
    }

    /// Traces, optimizes, schedules, pre-runs and captures the forward on inputs shaped like
    /// `inputs` (their values do not matter). Preparing again replaces the previous graph.
    ///
    /// Needs CUDA inputs on a CUDA device. Fails, leaving the model unprepared, when the
    /// forward synchronizes with the host, when its op sequence changes between passes, or when
    /// the algorithm is unknown.
    ///
    /// With [`PrepareOptions::training`], prepares the paper's training mode instead: the
    /// forward (multi-stream) and its backward are captured as two graphs behind a custom
    /// autograd function, so `forward`'s outputs carry autograd history and `backward` replays
    /// the backward graph into the parameters' `.grad` (see [`Nimble::forward`]).
    pub fn prepare(&mut self, inputs: &[Tensor], options: PrepareOptions) -> Result<&PrepareReport> {
        self.prepared = None;
        if options.training {
            return self.prepare_autograd(inputs, &options);
        }
        let (grouped_convs, channels_last) = self.prepare_inference(inputs, &options)?;
        if options.channels_last.is_none() && grouped_convs {
            self.try_other_layout(inputs, &options, channels_last)?;
        }
        Ok(&self.prepared.as_ref().expect("prepared above").report)
    }

    /// Prepares the other channels layout than the prepared one's, times both, and keeps the
    /// faster. `first`: whether the prepared one is channels-last. The two are timed in
    /// alternating blocks (warm-ups, then timed replays), so that a drift in the GPU's clocks
    /// over the trial favours neither.
    fn try_other_layout(&mut self, inputs: &[Tensor], options: &PrepareOptions, first: bool) -> Result<()> {
        let started = Instant::now();
        let prepared = self.prepared.take().expect("prepared before the trial");
        let first_seconds = prepared.report.seconds.total;
        self.prepare_inference(inputs, &options.clone().channels_last(Some(!first)))?;
        let mut slots = [Some(prepared), self.prepared.take()];
        let mut samples = [Vec::new(), Vec::new()];
        for _ in 0..LAYOUT_TRIAL.rounds {
            for (slot, samples) in slots.iter_mut().zip(samples.iter_mut()) {
                self.prepared = slot.take();
                let block = self.time_replays(inputs);
                *slot = self.prepared.take();
                samples.extend(block?);
            }
        }
        let [first_us, second_us] = samples.map(|mut s| {
            s.sort_by(f64::total_cmp);
            s[s.len() / 2]
        });
        let [first_prepared, second_prepared] = slots.map(|slot| slot.expect("put back after each block"));
        let (mut kept, dropped) = if second_us < first_us { (second_prepared, first_prepared) } else { (first_prepared, second_prepared) };
        // The other graph's memory goes back to the allocator before the kept one is handed out.
        drop(dropped);
        let (nchw_us, nhwc_us) = if first { (second_us, first_us) } else { (first_us, second_us) };
        kept.report.layout_trial = Some(LayoutTrial { nchw_us, nhwc_us });
        // Steps are the kept graph's own; the total is the whole prepare's.
        let seconds = &mut kept.report.seconds;
        seconds.layout_trial = started.elapsed().as_secs_f64();
        seconds.total = first_seconds + seconds.layout_trial;
        self.prepared = Some(kept);
        Ok(())
    }

    /// One block of the layout trial: `forward` on `inputs` after warm-ups, each timed replay
    /// in microseconds.
    fn time_replays(&self, inputs: &[Tensor]) -> Result<Vec<f64>> {
        for _ in 0..LAYOUT_TRIAL.warmup {
            self.forward(inputs)?;
        }
        let mut samples = Vec::with_capacity(LAYOUT_TRIAL.timed);
        for _ in 0..LAYOUT_TRIAL.timed {
            ffi::cuda_synchronize()?;
            samples.push(cuda_time(|| self.forward(inputs).map(drop))? * 1000.0);
        }
        Ok(samples)
    }

    /// `prepare` for inference with one layout. Returns whether the model has grouped
    /// convolutions and whether channels-last was applied.
    fn prepare_inference(&mut self, inputs: &[Tensor], options: &PrepareOptions) -> Result<(bool, bool)> {
        let started = Instant::now();
        let mut seconds = PrepareSeconds::default();
        let (device, assigner) = check_cuda_prepare(inputs, options)?;
        let mut static_inputs: Vec<Tensor> = inputs.iter().map(|t| t.detach().copy()).collect();

        let step = Instant::now();
        let mut applied = Applied::default();
        let optimized = if options.optimize {
            let (module, done) = self.optimized_module(&static_inputs, &options.rewrites())?;
            applied = done;
            if applied.channels_last {
                static_inputs = static_inputs.iter().map(ffi::channels_last_copy).collect::<Result<_>>()?;
            }
            Some(module)
        } else {
            None
        };
        seconds.optimize = step.elapsed().as_secs_f64();
        let runner = self.runner(optimized.as_ref());

        // Eager warm-up: lazy initialization, cuDNN's algorithm search (benchmark mode).
        let step = Instant::now();
        for _ in 0..2 {
            runner.run_caught(&static_inputs, false, "warm-up")?;
        }
        ffi::cuda_synchronize()?;
        seconds.warmup = step.elapsed().as_secs_f64();

        let step = Instant::now();
        let (trace, outputs) = record(|| runner.run(&static_inputs, false))?;
        outputs?;
        check_capturable(&trace)?;
        seconds.trace = step.elapsed().as_secs_f64();

        let step = Instant::now();
        let (graph, plan, schedule) = plan_schedule(&trace, assigner.as_ref(), device)?;
        seconds.schedule = step.elapsed().as_secs_f64();

        let step = Instant::now();
        let task_graph = time_ops(&trace, &graph, device, options.measure_durations, &runner, &static_inputs, false)?;
        seconds.time_ops = step.elapsed().as_secs_f64();

        // Pre-run on the planned streams: per-stream cuBLAS/cuDNN workspaces, nothing new at capture.
        let step = Instant::now();
        scheduled_run(&schedule, None, 0, &runner, &static_inputs, false, "pre-run")?;
        ffi::cuda_synchronize()?;
        seconds.prerun = step.elapsed().as_secs_f64();

        let step = Instant::now();
        let cuda_graph = CudaGraph::new()?;
        let outputs = scheduled_run(&schedule, Some((&cuda_graph, options.capture_mode)), 0, &runner, &static_inputs, false, "capture")?;
        cuda_graph.instantiate()?;
        let structure = cuda_graph.structure()?;
        cuda_graph.replay()?;
        ffi::cuda_synchronize()?;
        seconds.capture = step.elapsed().as_secs_f64();
        seconds.total = started.elapsed().as_secs_f64();

        let report = PrepareReport {
            mode: "inference",
            algorithm: plan.algorithm.clone(),
            optimized: options.optimize,
            channels_last: applied.channels_last,
            fused_ops: applied.fused_ops,
            ops: trace.len(),
            tasks: graph.len(),
            edges: graph.edge_count(),
            streams: plan.streams,
            syncs: plan.syncs.len(),
            graph_nodes: structure.node_types.len(),
            kernel_nodes: structure.kernel_count(),
            graph_width: structure.width(),
            backward_kernel_nodes: 0,
            layout_trial: None,
            seconds,
        };
        self.prepared = Some(Prepared {
            replay: Replay::Inference { outputs, graph: cuda_graph },
            _schedule: schedule,
            inputs: static_inputs,
            optimized,
            trace,
            task_graph,
            plan,
            report,
        });
        Ok((applied.grouped_convs, applied.channels_last))
    }

    /// Copies `inputs` into the graph's static inputs, replays the graph on the current stream,
    /// and returns its outputs. The outputs are the graph's own tensors: the next `forward`
    /// overwrites them (use [`Nimble::forward_owned`] to keep them).
    ///
    /// Prepared for training, the outputs carry autograd history: a `backward` through them
    /// replays the captured backward graph, and autograd accumulates its parameter gradients
    /// into `.grad` as usual (so any tch optimizer works unchanged). Call it with gradients on,
    /// and run backward once per forward, before the next forward (the graphs' activations are
    /// overwritten).
    pub fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let prepared = self.prepared.as_ref().ok_or(NimbleError::NotPrepared)?;
        if let Replay::Step { .. } = prepared.replay {
            return Err(NimbleError::Training("this model was prepared with prepare_train_step: call train_step, or prepare it again for forward".into()));
        }
        if let Replay::Autograd { .. } = prepared.replay {
            if !ffi::grad_enabled()? {
                return Err(NimbleError::Training(
                    "forward of a model prepared for training ran with gradients off (inside no_grad): run it with gradients on, or prepare with PrepareOptions::inference()".into(),
                ));
            }
        }
        copy_into(&prepared.inputs, inputs)?;
        match &prepared.replay {
            Replay::Inference { outputs, graph } => {
                graph.replay()?;
                Ok(outputs.iter().map(Tensor::shallow_clone).collect())
            }
            Replay::Autograd { state, .. } => state.forward(),
            Replay::Step { .. } => unreachable!("refused above"),
        }
    }

    /// Like [`Nimble::forward`], but returns copies that later calls do not overwrite.
    pub fn forward_owned(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(self.forward(inputs)?.iter().map(Tensor::copy).collect())
    }

    /// Runs the model eagerly (no graph), as prepared: after the inference rewrites when they
    /// were applied. Before `prepare`, the model as given.
    pub fn eager(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        let optimized = self.prepared.as_ref().and_then(|p| p.optimized.as_ref());
        self.runner(optimized).run_caught(inputs, false, "eager")
    }

    /// The recorded task graph (with measured `duration_us` when prepared with
    /// `measure_durations`), ready for nimble-sched and the simulator.
    pub fn task_graph(&self) -> Option<&TaskGraph> {
        self.prepared.as_ref().map(|p| &p.task_graph)
    }

    /// The recorded trace of the prepared forward.
    pub fn recorded_trace(&self) -> Option<&Trace> {
        self.prepared.as_ref().map(|p| &p.trace)
    }

    /// The stream plan the graph was captured with (over the task graph's node indices).
    pub fn plan(&self) -> Option<&StreamPlan> {
        self.prepared.as_ref().map(|p| &p.plan)
    }

    /// What the last successful `prepare` built.
    pub fn report(&self) -> Option<&PrepareReport> {
        self.prepared.as_ref().map(|p| &p.report)
    }

    /// Writes the forward, in evaluation mode and without the inference rewrites, as a
    /// TorchScript file (as `torch.jit.save` writes), traced on `inputs`: PyTorch's
    /// `torch.jit.load` and tch's `CModule` run it. The model's parameters must not require
    /// gradients (freeze its `VarStore`). The file is written through a temporary one.
    pub fn export_torchscript(&self, inputs: &[Tensor], path: impl AsRef<Path>) -> Result<()> {
        check_inputs_given(inputs)?;
        let path = path.as_ref();
        let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| NimbleError::InvalidInput(format!("{} is not a file path", path.display())))?;
        let temporary = path.with_file_name(format!(".{name}.partial"));
        let traced;
        let module = match &self.source {
            Source::TorchScript(module) => module,
            Source::Rust(f) => {
                traced = trace_to_torchscript(f, inputs)?;
                &traced
            }
        };
        module.save(&temporary)?;
        std::fs::rename(&temporary, path).map_err(|e| NimbleError::InvalidInput(format!("writing {}: {e}", path.display())))
    }

    /// Node kinds of the optimized TorchScript forward (after `prepare` with `optimize`).
    pub fn optimized_node_kinds(&self) -> Result<Option<Vec<(String, usize)>>> {
        match self.prepared.as_ref().and_then(|p| p.optimized.as_ref()) {
            Some(module) => Ok(Some(module.node_kinds()?)),
            None => Ok(None),
        }
    }

    pub(crate) fn runner<'a>(&'a self, optimized: Option<&'a JitModule>) -> Runner<'a> {
        match (optimized, &self.source) {
            (Some(module), _) => Runner::Jit(module),
            (None, Source::TorchScript(module)) => Runner::Jit(module),
            (None, Source::Rust(f)) => Runner::Rust(f),
        }
    }

    /// The forward as a frozen, optimized TorchScript module.
    fn optimized_module(&self, inputs: &[Tensor], rewrites: &Rewrites) -> Result<(JitModule, Applied)> {
        let mut rewrites = *rewrites;
        if !inputs.iter().any(|t| t.device().is_cuda()) {
            (rewrites.fuse_conv_relu, rewrites.channels_last) = (false, Some(false));
        }
        let explain = |e: NimbleError| match e {
            NimbleError::Torch { message, .. } | NimbleError::ForwardFailed { message, .. } if message.contains("requires grad") => NimbleError::InvalidInput(format!(
                "the inference rewrites trace the forward into TorchScript, which cannot take parameters that require gradients: \
                 call `freeze()` on the model's VarStore, or prepare with `optimize(false)` ({message})"
            )),
            other => other,
        };
        let traced;
        let module = match &self.source {
            Source::TorchScript(module) => module,
            Source::Rust(f) => {
                traced = trace_to_torchscript(f, inputs).map_err(explain)?;
                &traced
            }
        };
        let (optimized, applied) = module.optimized(&rewrites)?;
        // The first runs of a TorchScript module differ (profiling); settle it before tracing.
        for _ in 0..2 {
            Runner::Jit(&optimized).run_caught(inputs, false, "TorchScript warm-up")?;
        }
        Ok((optimized, applied))
    }
}

/// A TorchScript trace of the forward `f` (evaluation mode, gradients off) on `inputs`.
fn trace_to_torchscript(f: &ForwardFn, inputs: &[Tensor]) -> Result<JitModule> {
    let mut failure = None;
    let result = JitModule::trace(inputs, || {
        let out = tch::no_grad(|| catch_unwind(AssertUnwindSafe(|| f(inputs, false))));
        match out {
            Ok(tensors) => tensors,
            Err(panic) => {
                failure = Some(panic_message(&panic));
                Vec::new()
            }
        }
    });
    if let Some(message) = failure {
        return Err(NimbleError::ForwardFailed { pass: "TorchScript trace", message });
    }
    result
}

/// One scheduled pass of `runner` on `inputs` (captured when `capture` is given).
pub(crate) fn scheduled_run(
    schedule: &Schedule,
    capture: Option<(&CudaGraph, CaptureMode)>,
    gate_cycles: i64,
    runner: &Runner<'_>,
    inputs: &[Tensor],
    train: bool,
    pass: &'static str,
) -> Result<Vec<Tensor>> {
    match schedule.pass(capture, gate_cycles, || runner.run_caught(inputs, train, pass))? {
        Ok(outputs) => outputs,
        Err(problem) => Err(NimbleError::OpMismatch { pass, detail: problem }),
    }
}

/// The checks every `prepare` starts with: inputs given, a CUDA device, all inputs on it, a
/// known algorithm. Turns cuDNN's benchmark mode on when asked. Returns the device and the
/// assigner.
pub(crate) fn check_cuda_prepare(inputs: &[Tensor], options: &PrepareOptions) -> Result<(usize, Box<dyn nimble_sched::StreamAssigner>)> {
    check_inputs_given(inputs)?;
    if ffi::cuda_device_count()? == 0 {
        return Err(NimbleError::NoCuda);
    }
    let device = cuda_device_of(inputs)?;
    let assigner = algorithms::by_name(&options.algorithm)?;
    if options.cudnn_benchmark {
        tch::Cuda::cudnn_set_benchmark(true);
    }
    Ok((device, assigner))
}

/// A recorded forward must not sync with the host and must run on the GPU.
pub(crate) fn check_capturable(trace: &Trace) -> Result<()> {
    if let Some((index, op)) = trace.first_host_sync() {
        return Err(NimbleError::HostSync { index, op: op.name.clone(), via: op.host_sync.clone().unwrap_or_default() });
    }
    if !trace.is_cuda() {
        return Err(NimbleError::InvalidInput("the forward ran no op on a CUDA tensor: move the model's parameters to the inputs' CUDA device".into()));
    }
    Ok(())
}

/// The trace's task graph, the assigner's plan for it, and the schedule that issues it.
pub(crate) fn plan_schedule(trace: &Trace, assigner: &dyn nimble_sched::StreamAssigner, device: usize) -> Result<(TaskGraph, StreamPlan, Schedule)> {
    let graph = trace.task_graph()?;
    let analysis = Analysis::new(&graph);
    let assigned = assigner.assign(&analysis);
    // Syncs for the order in which the ops will really be issued: the traced one.
    let plan = StreamPlan::from_assignment(&analysis, assigned.algorithm.clone(), &assigned.stream_of, Some((0..graph.len()).collect()));
    let schedule = planned_schedule(trace, &graph, &plan, device)?;
    Ok((graph, plan, schedule))
}

/// The task graph with each op's GPU time from one gated single-stream pass (when `measure`).
pub(crate) fn time_ops(trace: &Trace, graph: &TaskGraph, device: usize, measure: bool, runner: &Runner<'_>, inputs: &[Tensor], train: bool) -> Result<TaskGraph> {
    if !measure {
        return Ok(graph.clone());
    }
    let timing = single_stream_schedule(trace, Some(device), true)?;
    scheduled_run(&timing, None, TIMING_GATE_CYCLES, runner, inputs, train, "timing")?;
    let durations = timing.durations_us()?;
    // Node ids are trace positions.
    Ok(graph.with_durations(|_, node| Some(durations[node.id as usize])))
}

/// Copies `inputs` into a prepared graph's static inputs, after checking them against those.
pub(crate) fn copy_into(targets: &[Tensor], inputs: &[Tensor]) -> Result<()> {
    check_like(inputs, targets)?;
    for (target, input) in targets.iter().zip(inputs) {
        let mut target = target.shallow_clone();
        target.f_copy_(input).map_err(|e| NimbleError::Torch { call: "copy_", message: e.to_string() })?;
    }
    Ok(())
}

/// The plan (over the task graph's nodes, whose ids are trace positions) as per-op arrays over
/// the whole trace: ops left out of the task graph run on the origin stream and wait on nothing.
fn planned_schedule(trace: &Trace, graph: &TaskGraph, plan: &StreamPlan, device: usize) -> Result<Schedule> {
    let names: Vec<&str> = trace.ops.iter().map(|op| op.name.as_str()).collect();
    let n = trace.len();
    let op_of = |node: usize| graph.id_of(node) as usize;
    let mut stream_of = vec![0usize; n];
    let mut waits = vec![Vec::new(); n];
    let mut record_after = vec![false; n];
    for (node, &stream) in plan.stream_of.iter().enumerate() {
        stream_of[op_of(node)] = stream;
    }
    for &(u, v) in &plan.syncs {
        waits[op_of(v)].push(op_of(u));
        record_after[op_of(u)] = true;
    }
    let spec = ScheduleSpec { names: &names, stream_of: &stream_of, waits: &waits, record: &record_after, streams: plan.streams.max(1) };
    Schedule::new(&spec, Some(device), false)
}

/// Every op on one stream, no syncs: for timing ops, or (without a device) for checking that a
/// run issues the traced op sequence.
fn single_stream_schedule(trace: &Trace, device: Option<usize>, timing: bool) -> Result<Schedule> {
    let n = trace.len();
    let names: Vec<&str> = trace.ops.iter().map(|op| op.name.as_str()).collect();
    let spec = ScheduleSpec { names: &names, stream_of: &vec![0; n], waits: &vec![Vec::new(); n], record: &vec![false; n], streams: 1 };
    Schedule::new(&spec, device, timing)
}

fn check_inputs_given(inputs: &[Tensor]) -> Result<()> {
    if inputs.is_empty() {
        return Err(NimbleError::InvalidInput("no input tensors given: pass the forward's inputs (shapes matter, values do not)".into()));
    }
    Ok(())
}

/// The CUDA device all inputs are on.
fn cuda_device_of(inputs: &[Tensor]) -> Result<usize> {
    let mut device = None;
    for (index, input) in inputs.iter().enumerate() {
        match input.device() {
            Device::Cuda(d) if device.is_none() || device == Some(d) => device = Some(d),
            Device::Cuda(d) => {
                return Err(NimbleError::InvalidInput(format!("input {index} is on cuda:{d}, expected cuda:{} like input 0", device.unwrap_or(0))))
            }
            other => {
                return Err(NimbleError::InvalidInput(format!(
                    "input {index} is on {other:?}, expected a CUDA device: prepare captures a CUDA graph (move the model and its inputs to CUDA)"
                )))
            }
        }
    }
    device.ok_or_else(|| NimbleError::InvalidInput("no input tensors given".into()))
}

/// Checks `inputs` against the static inputs: count, device, dtype, shape.
fn check_like(inputs: &[Tensor], expected: &[Tensor]) -> Result<()> {
    if inputs.len() != expected.len() {
        return Err(NimbleError::InputCount { expected: expected.len(), got: inputs.len() });
    }
    for (index, (got, want)) in inputs.iter().zip(expected).enumerate() {
        let mismatch = |what, expected: String, got: String| Err(NimbleError::InputMismatch { index, what, expected, got });
        if !got.defined() {
            return mismatch("the tensor", "a defined tensor".into(), "undefined".into());
        }
        if got.device() != want.device() {
            return mismatch("the device", format!("{:?}", want.device()), format!("{:?}", got.device()));
        }
        if got.kind() != want.kind() {
            return mismatch("the dtype", format!("{:?}", want.kind()), format!("{:?}", got.kind()));
        }
        if got.size() != want.size() {
            return mismatch("the shape", format!("{:?}", want.size()), format!("{:?}", got.size()));
        }
    }
    Ok(())
}

/// Bytes the CUDA caching allocator has handed out on `device` and not taken back.
pub fn cuda_allocated_bytes(device: usize) -> Result<u64> {
    ffi::cuda_allocated_bytes(device)
}

/// Returns the CUDA caching allocator's unused cached blocks to the driver (PyTorch's
/// `torch.cuda.empty_cache()`), so that what runs next allocates as in a fresh process.
pub fn cuda_empty_cache() -> Result<()> {
    ffi::cuda_empty_cache()
}

/// Waits for all GPU work of this process.
pub fn cuda_synchronize() -> Result<()> {
    ffi::cuda_synchronize()
}

/// Times `body` on the GPU with CUDA events on the current stream (milliseconds).
pub fn cuda_time(body: impl FnOnce() -> Result<()>) -> Result<f64> {
    let timer = ffi::Timer::new()?;
    timer.start()?;
    body()?;
    timer.stop()
}

/// max |output − reference| / max |reference|: how the project compares a prepared model's
/// output with eager.
pub fn relative_error(output: &Tensor, reference: &Tensor) -> f64 {
    let scale = reference.abs().max().double_value(&[]).max(f64::MIN_POSITIVE);
    (output - reference).abs().max().double_value(&[]) / scale
}
