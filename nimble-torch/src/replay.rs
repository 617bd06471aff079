//! The last stage, replay: what `prepare` leaves behind ([`Prepared`]: the captured graphs,
//! their static inputs and outputs, and everything recorded on the way) and running it: copy the
//! inputs in, replay, hand the static outputs out.

use nimble_graph::TaskGraph;
use nimble_sched::StreamPlan;
use tch::Tensor;

use crate::error::{NimbleError, Result};
use crate::ffi::{self, CudaGraph, JitModule, Schedule, TrainState};
use crate::inputs::copy_into;
use crate::optimizer::OptimizerState;
use crate::options::PrepareReport;
use crate::output::Layout;
use crate::trace::Trace;

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
        /// A data-parallel step's all-reduces use the communicator on every replay.
        _comm: Option<std::rc::Rc<crate::distributed::Communicator>>,
    },
}

/// A prepared model: its graphs and what was recorded on the way to them.
pub(crate) struct Prepared {
    pub(crate) replay: Replay,
    pub(crate) _schedule: Schedule,
    pub(crate) inputs: Vec<Tensor>,
    /// How the forward's output is put together around the graph's output tensors.
    pub(crate) layout: Layout,
    /// The TorchScript module the forward runs through when it is not the source: the optimized
    /// one, or either with host-computed values folded into constants (then specialized to the
    /// static inputs' shapes: see `host_values_folded`).
    pub(crate) module: Option<JitModule>,
    pub(crate) trace: Trace,
    pub(crate) task_graph: TaskGraph,
    pub(crate) plan: StreamPlan,
    pub(crate) report: PrepareReport,
}

impl Prepared {
    /// Copies `inputs` in, replays, and returns the output tensors (see `Nimble::forward`).
    pub(crate) fn forward(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        if let Replay::Step { .. } = self.replay {
            return Err(NimbleError::Training("this model was prepared with prepare_train_step: call train_step, or prepare it again for forward".into()));
        }
        if let Replay::Autograd { .. } = self.replay {
            if !ffi::grad_enabled()? {
                return Err(NimbleError::Training(
                    "forward of a model prepared for training ran with gradients off (inside no_grad): run it with gradients on, or prepare with PrepareOptions::inference()".into(),
                ));
            }
        }
        copy_into(&self.inputs, inputs)?;
        match &self.replay {
            Replay::Inference { outputs, graph } => {
                graph.replay()?;
                Ok(outputs.iter().map(Tensor::shallow_clone).collect())
            }
            Replay::Autograd { state, .. } => state.forward(),
            Replay::Step { .. } => unreachable!("refused above"),
        }
    }

    /// Copies `inputs` and `targets` in, replays the whole training step, and returns the loss
    /// (see `Nimble::train_step`).
    pub(crate) fn train_step(&self, inputs: &[Tensor], targets: &Tensor) -> Result<Tensor> {
        let Replay::Step { loss, targets: static_targets, graph, .. } = &self.replay else {
            return Err(NimbleError::Training("train_step needs a model prepared with prepare_train_step".into()));
        };
        copy_into(&self.inputs, inputs)?;
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
