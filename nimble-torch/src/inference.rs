//! The inference pipeline: the stages in the order data flows through them, for one layout.
//!
//! ```text
//! source     the model as given (source.rs)
//! optimize   TorchScript, frozen, rewritten (optimize.rs)          -> module, static inputs
//!            and host-computed values copied to the GPU made constants (host_values.cpp)
//! warm-up    two eager runs: lazy init, cuDNN's algorithm search    -> the output's layout
//! record     the top-level ops and their storages (trace.rs)        -> Trace
//! schedule   task graph, stream plan, the shim's schedule (schedule.rs)
//! time ops   one gated single-stream pass with an event pair per op -> durations
//! pre-run    one pass on the planned streams (per-stream workspaces)
//! capture    one pass on the planned streams inside a CUDA graph    -> Prepared (replay.rs)
//! ```

use std::cell::Cell;
use std::time::Instant;

use tch::Tensor;

use crate::error::{NimbleError, Result};
use crate::ffi::{self, Applied, CudaGraph, Rewrites};
use crate::inputs::check_cuda_prepare;
use crate::optimize::{optimized_module, with_host_values_folded};
use crate::options::{PrepareOptions, PrepareReport, PrepareSeconds};
use crate::replay::{Prepared, Replay};
use crate::schedule::{check_capturable, plan_schedule, scheduled_run, time_ops};
use crate::source::Source;
use crate::trace::record;

/// Prepares `source` for inference with the layout `options` give (or the rewrites decide).
/// Returns the prepared model and what the rewrites did (whether the model has 2-D
/// convolutions, whether channels-last was applied).
pub(crate) fn prepare(source: &Source, inputs: &[Tensor], options: &PrepareOptions) -> Result<(Prepared, Applied)> {
    let frozen_on_host = Cell::new(false);
    match prepare_frozen(source, inputs, options, options.freeze_on_host, &frozen_on_host) {
        // Frozen on a CPU copy (the shim's freeze.cpp), a constant the GPU would have kept can
        // stay on the CPU, and its copy to the GPU is a host sync: frozen where the model lives,
        // it is refused only if it synchronizes anyway. (A module the size rule left on the GPU
        // would only fail again.)
        Err(NimbleError::HostSync { .. }) if frozen_on_host.get() => prepare_frozen(source, inputs, options, false, &frozen_on_host),
        done => done,
    }
}

/// `prepare`, the module frozen on a CPU copy when `freeze_on_host` (and the shim judges that
/// faster); `frozen_on_host` says whether it was, once the rewrites are done.
fn prepare_frozen(source: &Source, inputs: &[Tensor], options: &PrepareOptions, freeze_on_host: bool, frozen_on_host: &Cell<bool>) -> Result<(Prepared, Applied)> {
    let started = Instant::now();
    let mut seconds = PrepareSeconds::default();
    let (device, assigner) = check_cuda_prepare(inputs, options)?;
    let mut static_inputs: Vec<Tensor> = inputs.iter().map(|t| t.detach().copy()).collect();

    let step = Instant::now();
    let mut applied = Applied::default();
    let optimized = if options.optimize {
        let (module, done) = optimized_module(source, &static_inputs, &Rewrites { freeze_on_host, ..options.rewrites() })?;
        applied = done;
        frozen_on_host.set(applied.frozen_on_host);
        if applied.channels_last {
            static_inputs = static_inputs.iter().map(ffi::channels_last_copy).collect::<Result<_>>()?;
        }
        Some(module)
    } else {
        None
    };
    // Values the host computes from constants and the inputs' shapes and copies to the GPU:
    // constants of the graph captured for these shapes (a copy from the host cannot be captured).
    let (module, host_values_folded) = with_host_values_folded(source, optimized, &static_inputs)?;
    seconds.optimize = step.elapsed().as_secs_f64();
    let runner = source.runner(module.as_ref());

    // Eager warm-up: lazy initialization, cuDNN's algorithm search (benchmark mode).
    let step = Instant::now();
    let mut layout = None;
    for _ in 0..2 {
        layout = Some(runner.run_structured_caught(&static_inputs, "warm-up")?.1);
    }
    let layout = layout.expect("two warm-up runs");
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
    if outputs.len() != layout.tensor_count() {
        return Err(NimbleError::OpMismatch {
            pass: "capture",
            detail: format!("the forward returned {} tensors, but {} in the warm-up", outputs.len(), layout.tensor_count()),
        });
    }
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
        host_values_folded,
        frozen_on_host: applied.frozen_on_host,
        ops: trace.len(),
        tasks: graph.len(),
        edges: graph.edge_count(),
        streams: plan.streams,
        syncs: plan.syncs.len(),
        graph_nodes: structure.node_types.len(),
        kernel_nodes: structure.kernel_count(),
        graph_width: structure.width(),
        backward_kernel_nodes: 0,
        gradient_buckets: 0,
        layout_trial: None,
        seconds,
    };
    let prepared = Prepared {
        replay: Replay::Inference { outputs, graph: cuda_graph },
        _schedule: schedule,
        inputs: static_inputs,
        layout,
        module,
        trace,
        task_graph,
        plan,
        report,
    };
    Ok((prepared, applied))
}
