//! The façade: [`Nimble`] wraps a model and runs the pipeline's stages on `prepare`; every
//! method here delegates to a stage (`inference`, `layout`, `training`, `replay`, …).

use std::path::Path;

use nimble_graph::step::{training_step, StepOptions, TrainingStep};
use nimble_graph::TaskGraph;
use nimble_sched::StreamPlan;
use tch::nn::ModuleT;
use tch::{Device, Kind, Tensor};

use crate::error::{NimbleError, Result};
use crate::ffi::{JitModule, Rewrites};
use crate::inference;
use crate::inputs::check_inputs_given;
use crate::layout;
use crate::optimize::{optimized_module, with_host_values_folded, TRACE_REWRITES};
use crate::options::{PrepareOptions, PrepareReport};
use crate::output::{Layout, Value};
use crate::replay::Prepared;
use crate::schedule::{scheduled_run, single_stream_schedule};
use crate::source::{Runner, Source};
use crate::trace::{record, Trace};
use crate::training::{self, TrainStep};

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

    /// A TorchScript model's forward arguments (after `self`): name, type (`Tensor` for every
    /// argument of a traced module) and whether it has a default. `None` for a Rust forward.
    pub fn torchscript_arguments(&self) -> Result<Option<Vec<(String, String, bool)>>> {
        match &self.source {
            Source::TorchScript(module) => module.arguments().map(Some),
            Source::Rust(_) => Ok(None),
        }
    }

    /// Converts a TorchScript model's floating-point parameters and buffers to `kind`
    /// (`Kind::Half`, `Kind::BFloat16`, …), as `module.to(dtype)` does in PyTorch; a prepared
    /// graph is dropped. Dtypes the trace wrote into the graph itself (a `torch.float32`
    /// argument) stay: export such a model in the dtype it should run in. A Rust forward's
    /// parameters are converted through its VarStore (`vs.half()`, `vs.bfloat16()`).
    pub fn to_kind(&mut self, kind: Kind) -> Result<()> {
        self.prepared = None;
        match &self.source {
            Source::TorchScript(module) => module.to_kind(kind),
            Source::Rust(_) => Err(NimbleError::InvalidInput(
                "to_kind converts TorchScript models; convert a Rust model's parameters through its VarStore (vs.half(), vs.bfloat16())".into(),
            )),
        }
    }

    /// Makes a TorchScript model read the caller's own tensors: each `(name, tensor)` (names
    /// dotted as PyTorch's `named_parameters` and `named_buffers` write them) replaces that
    /// parameter or buffer of the loaded module with the tensor itself, which must have its
    /// dtype, shape and device. The module's forward, and graphs prepared afterwards, then read
    /// those tensors, and training updates them and accumulates into their `.grad` (how the
    /// Python package trains the user's `nn.Module` and not a copy loaded from the file). A
    /// prepared graph is dropped. A bad name or tensor is an error naming it, and then none is
    /// bound.
    pub fn bind_tensors(&mut self, named: &[(String, Tensor)]) -> Result<()> {
        let Source::TorchScript(module) = &self.source else {
            return Err(NimbleError::InvalidInput("bind_tensors replaces a TorchScript model's parameters; a Rust model reads its VarStore's own".into()));
        };
        self.prepared = None;
        let as_input = |e: NimbleError| match e {
            NimbleError::Torch { call: "jit_bind", message } => NimbleError::InvalidInput(message),
            other => other,
        };
        // Every binding is checked first, so a bad one binds none.
        for check_only in [true, false] {
            for (name, tensor) in named {
                module.bind(name, tensor, check_only).map_err(as_input)?;
            }
        }
        Ok(())
    }

    /// Records one forward on `inputs` (any device, CPU included) without preparing anything:
    /// the trace, after the inference rewrites when `optimize` (BatchNorm folding, SiLU and
    /// Nimble's fused ops; cuDNN's fusions and the channels-last layout are left to `prepare`),
    /// and, as `prepare` does, with each value the host makes from the inputs' shapes and copies
    /// to the device folded into a constant for these shapes.
    pub fn trace(&self, inputs: &[Tensor], optimize: bool) -> Result<Trace> {
        check_inputs_given(inputs)?;
        let optimized = if optimize { Some(optimized_module(&self.source, inputs, &TRACE_REWRITES)?.0) } else { None };
        // The graph `prepare` captures: host-made values copied to the device are constants.
        let (optimized, _) = with_host_values_folded(&self.source, optimized, inputs)?;
        let runner = self.source.runner(optimized.as_ref());
        runner.run_caught(inputs, false, "warm-up")?;
        let (trace, outputs) = record(|| runner.run(inputs, false))?;
        outputs?;
        // A second run must issue the same ops, or the model is not static.
        scheduled_run(&single_stream_schedule(&trace, None, crate::ffi::OpTiming::Off)?, None, 0, &runner, inputs, false, "check")?;
        Ok(trace)
    }

    /// Records one training forward on `inputs` (any device, CPU included) without preparing
    /// anything: the trace, with the parameters it reads ([`Trace::params`]). Its
    /// [`Trace::task_graph`] marks each op's parameters, which is what
    /// [`nimble_graph::step::training_step`] builds a whole training step's task graph from
    /// (backward, gradient all-reduces, optimizer). The parameters and buffers keep their values
    /// (BatchNorm's running statistics are put back).
    pub fn training_trace(&self, inputs: &[Tensor]) -> Result<Trace> {
        check_inputs_given(inputs)?;
        training::training_trace(&self.source, inputs)
    }

    /// The whole training step around the prepared forward's task graph (with its measured
    /// durations), as [`nimble_graph::step::training_step`] builds it: after `prepare` for
    /// training or `prepare_train_step`, whose forwards record their parameters.
    pub fn step_graph(&self, options: &StepOptions) -> Result<TrainingStep> {
        Ok(training_step(&self.prepared()?.task_graph, options)?)
    }

    /// Runs the forward once, eagerly (any device, CPU included), after the inference rewrites
    /// that `trace(inputs, true)` records: a way to check what the rewrites compute, Nimble's
    /// fused ops included, against the model itself.
    pub fn run_optimized(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.run_optimized_with(inputs, &PrepareOptions::inference())
    }

    /// As [`Nimble::run_optimized`], with the rewrites' choices of `options` that change what
    /// the forward computes ([`PrepareOptions::fold_half_precision`]).
    pub fn run_optimized_with(&self, inputs: &[Tensor], options: &PrepareOptions) -> Result<Vec<Tensor>> {
        check_inputs_given(inputs)?;
        let rewrites = Rewrites { fold_half_precision: options.fold_half_precision, ..TRACE_REWRITES };
        let (module, _) = optimized_module(&self.source, inputs, &rewrites)?;
        let (module, _) = with_host_values_folded(&self.source, Some(module), inputs)?;
        Runner::Jit(module.as_ref().expect("a rewritten module stays one")).run_caught(inputs, false, "optimized forward")
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
        let prepared = if options.training {
            training::prepare_autograd(&self.source, inputs, &options)?
        } else {
            let (prepared, applied) = inference::prepare(&self.source, inputs, &options)?;
            if options.channels_last.is_none() && layout::worth_a_trial(&applied, prepared.report.seconds.total) {
                layout::keep_faster(&self.source, inputs, &options, prepared, applied.channels_last)?
            } else {
                prepared
            }
        };
        Ok(&self.prepared.insert(prepared).report)
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
        self.prepared()?.forward(inputs)
    }

    /// Like [`Nimble::forward`], but returns the output in the structure the model returns it
    /// (tuples, lists, dicts, `None` and constants around the graph's tensors), as PyTorch
    /// would: a TorchScript model from transformers gives its tuple back.
    pub fn forward_value(&self, inputs: &[Tensor]) -> Result<Value> {
        let prepared = self.prepared()?;
        prepared.layout.fill(&prepared.forward(inputs)?)
    }

    /// How the prepared forward's output is put together around its tensors.
    pub fn output_layout(&self) -> Option<&Layout> {
        self.prepared.as_ref().map(|p| &p.layout)
    }

    /// Like [`Nimble::forward`], but returns copies that later calls do not overwrite.
    pub fn forward_owned(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        Ok(self.forward(inputs)?.iter().map(Tensor::copy).collect())
    }

    /// Runs the model eagerly (no graph), as prepared: after the inference rewrites when they
    /// were applied. Before `prepare`, the model as given. When `prepare` folded host-computed
    /// values into constants (`PrepareReport::host_values_folded`), only inputs of the prepared
    /// shapes are taken.
    pub fn eager(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.eager_runner(inputs)?.run_caught(inputs, false, "eager")
    }

    /// Like [`Nimble::eager`], but returns the output in the structure the model returns it (see
    /// [`Nimble::forward_value`]): the reference a prepared model's output is checked against.
    pub fn eager_value(&self, inputs: &[Tensor]) -> Result<Value> {
        let (tensors, layout) = self.eager_runner(inputs)?.run_structured_caught(inputs, "eager")?;
        layout.fill(&tensors)
    }

    /// What runs the forward eagerly as prepared, after checking that a forward specialized to
    /// the prepared shapes gets those.
    fn eager_runner(&self, inputs: &[Tensor]) -> Result<Runner<'_>> {
        let Some(prepared) = self.prepared.as_ref() else { return Ok(self.runner(None)) };
        if prepared.report.host_values_folded > 0 {
            let (given, expected): (Vec<Vec<i64>>, Vec<Vec<i64>>) = (inputs.iter().map(Tensor::size).collect(), prepared.inputs.iter().map(Tensor::size).collect());
            if given != expected {
                return Err(NimbleError::InvalidInput(format!(
                    "the prepared forward computes {} value(s) from the input shapes {expected:?} once, at prepare (copies from the host to the GPU, \
                     which a CUDA graph cannot capture), so eager takes only those shapes, but got {given:?}: prepare again for these",
                    prepared.report.host_values_folded
                )));
            }
        }
        Ok(self.runner(prepared.module.as_ref()))
    }

    /// The recorded task graph (with measured `duration_us` when prepared with
    /// `measure_durations`), ready for nimble-sched and the simulator.
    pub fn task_graph(&self) -> Option<&TaskGraph> {
        self.prepared.as_ref().map(|p| &p.task_graph)
    }

    /// The prepared task graph with each op's time taken from its own kernels: the forward
    /// captured on one stream and replayed under the device profiler (see `kernel_times.rs`),
    /// `duration_us` the median time during which one of the op's kernels ran (from the previous
    /// op's end on), with attributes `kernel_span_us` (its first start to its last end),
    /// `kernels`, `sm_share` (from the kernels' grids) and `event_us` (the event-timed
    /// duration). What the simulator should be fed. Prepared for inference on CUDA only. The
    /// profiler stays loaded and slows later launches: call it after anything timed.
    pub fn kernel_timed_graph(&self) -> Result<TaskGraph> {
        let prepared = self.prepared.as_ref().ok_or_else(|| NimbleError::InvalidInput("kernel_timed_graph needs a prepared model: call prepare first".into()))?;
        if prepared.report.mode != "inference" {
            return Err(NimbleError::InvalidInput(format!("kernel_timed_graph times an inference forward, but this model was prepared for {}", prepared.report.mode)));
        }
        let Some(Device::Cuda(device)) = prepared.inputs.first().map(Tensor::device) else {
            return Err(NimbleError::InvalidInput("kernel_timed_graph needs a model prepared on CUDA inputs".into()));
        };
        let runner = self.source.runner(prepared.module.as_ref());
        crate::kernel_times::kernel_timed_graph(&prepared.trace, &prepared.task_graph, device, &runner, &prepared.inputs, nimble_cuda::CaptureMode::ThreadLocal)
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
        let mut traced = None;
        self.source.as_torchscript(inputs, &mut traced)?.save(&temporary)?;
        std::fs::rename(&temporary, path).map_err(|e| NimbleError::InvalidInput(format!("writing {}: {e}", path.display())))
    }

    /// Node kinds of the optimized TorchScript forward (after `prepare` with `optimize`).
    pub fn optimized_node_kinds(&self) -> Result<Option<Vec<(String, usize)>>> {
        match self.prepared.as_ref().filter(|p| p.report.optimized).and_then(|p| p.module.as_ref()) {
            Some(module) => Ok(Some(module.node_kinds()?)),
            None => Ok(None),
        }
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
        let prepared = self.prepared.insert(training::prepare_train_step(&self.source, inputs, targets, options, step)?);
        Ok(&prepared.report)
    }

    /// One training step (forward, loss, backward, optimizer update) on `inputs` and `targets`,
    /// replayed from the graph [`Nimble::prepare_train_step`] captured. Returns the loss (a
    /// tensor of the graph that the next step overwrites: copy it to keep it).
    pub fn train_step(&self, inputs: &[Tensor], targets: &Tensor) -> Result<Tensor> {
        self.prepared()?.train_step(inputs, targets)
    }

    fn prepared(&self) -> Result<&Prepared> {
        self.prepared.as_ref().ok_or(NimbleError::NotPrepared)
    }

    fn runner<'a>(&'a self, optimized: Option<&'a JitModule>) -> Runner<'a> {
        self.source.runner(optimized)
    }
}
