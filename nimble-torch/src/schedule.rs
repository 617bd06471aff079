//! Stages 3 and 4, schedule and time: the trace's task graph, the assigner's stream plan for it,
//! the shim's schedule that issues it op by op, and each op's GPU time; and running one
//! scheduled pass of the forward (checked against the trace op by op, captured or not).

use nimble_cuda::CaptureMode;
use nimble_graph::TaskGraph;
use nimble_sched::{Analysis, StreamPlan};
use tch::Tensor;

use crate::error::{NimbleError, Result};
use crate::ffi::{CudaGraph, OpTiming, Schedule, ScheduleSpec};
use crate::source::Runner;
use crate::trace::Trace;


/// How long the timing pass holds its stream before the ops (GPU clock cycles, about 50 ms on
/// current GPUs), so all ops are queued when they run and their events time the GPU alone.
const TIMING_GATE_CYCLES: i64 = 100_000_000;

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

/// A recorded forward must not sync with the host and must run on the GPU.
pub(crate) fn check_capturable(trace: &Trace) -> Result<()> {
    if let Some((index, op)) = trace.first_host_sync() {
        let via = op.host_sync.clone().unwrap_or_default();
        let reason = crate::error::host_sync_reason(&op.name, &via);
        return Err(NimbleError::HostSync { index, op: op.name.clone(), via, reason });
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
    // A malformed assignment (a new algorithm's bug) is an error naming it, before the shim sees it.
    nimble_sched::verified(&analysis, &plan)?;
    let schedule = planned_schedule(trace, &graph, &plan, device)?;
    Ok((graph, plan, schedule))
}

/// The task graph with each op's GPU time from one gated single-stream pass (when `measure`).
pub(crate) fn time_ops(trace: &Trace, graph: &TaskGraph, device: usize, measure: bool, runner: &Runner<'_>, inputs: &[Tensor], train: bool) -> Result<TaskGraph> {
    if !measure {
        return Ok(graph.clone());
    }
    let timing = single_stream_schedule(trace, Some(device), OpTiming::Events)?;
    scheduled_run(&timing, None, TIMING_GATE_CYCLES, runner, inputs, train, "timing")?;
    let durations = timing.durations_us()?;
    // Node ids are trace positions.
    Ok(graph.with_durations(|_, node| Some(durations[node.id as usize])))
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
    Schedule::new(&spec, Some(device), OpTiming::Off)
}

/// Every op on one stream, no syncs: for timing ops, or (without a device) for checking that a
/// run issues the traced op sequence.
pub(crate) fn single_stream_schedule(trace: &Trace, device: Option<usize>, timing: OpTiming) -> Result<Schedule> {
    let n = trace.len();
    let names: Vec<&str> = trace.ops.iter().map(|op| op.name.as_str()).collect();
    let spec = ScheduleSpec { names: &names, stream_of: &vec![0; n], waits: &vec![Vec::new(); n], record: &vec![false; n], streams: 1 };
    Schedule::new(&spec, device, timing)
}
