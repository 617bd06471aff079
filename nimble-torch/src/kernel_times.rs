//! Each op's GPU time from its own kernels, for a task graph that makes the simulator right.
//!
//! The forward is captured on one stream into a CUDA graph while the shim counts, per op, the
//! nodes the capture gained while the op ran, so op `k`'s nodes are a contiguous run of the
//! graph's. A one-stream capture is usually a chain, but a library may fork inside an op (cuDNN
//! does for some grouped convolutions) and join before it returns; either way no node of op
//! `k + 1` starts before every node of op `k` has started, so in a replay's activities sorted by
//! start op `k`'s are the `k`-th run. The graph is then replayed under the device profiler
//! (Kineto/CUPTI), and op `k`'s time is the median over replays of the time during which one of
//! its kernels (or copies) ran: the GPU's own time for the op, without the microsecond or two
//! that an event pair around each op adds. Each op also gets the median span from its first
//! start to its last end (`kernel_span_us`), its kernel count and an `sm_share` (how much of
//! the GPU its grids fill, kernels weighted by time).
//!
//! Not the span: under the profiler, a process may replay the same graph with gaps between
//! kernels that it does not have without it. On an H200, Inception-v3's one-stream graph
//! replayed in 969-995 µs without the profiler in each of 16 processes, and under it in
//! 990-1009 µs in 13 of them but 1090-1160 µs in 3, whose kernels' times still summed to
//! 938-950 µs as everywhere else (which kernels cuDNN's search picks differs between processes).
//! Summed, the ops' spans came to 1032-1193 µs in such processes, more than the replay.
//!
//! Kernels launched with programmatic dependent launch (cuBLAS and cuDNN on Hopper) may start
//! before the previous one ends and wait inside for it: an op's time counts from its
//! predecessor's last end, so that the ops' times add up to at most the replay rather than
//! counting an overlap twice.
//!
//! The profiler stays loaded in the process afterwards (Kineto does not tear CUPTI down), which
//! slows later launches: take kernel times after anything timed in the same process.

use std::ops::Range;

use nimble_graph::TaskGraph;
use serde_json::json;
use tch::Tensor;

use crate::error::{NimbleError, Result};
use crate::ffi::{self, CudaGraph, OpTiming};
use crate::profile::{profile, Activity, SmLimits};
use crate::schedule::{scheduled_run, single_stream_schedule};
use crate::source::Runner;
use crate::trace::Trace;
use nimble_cuda::CaptureMode;

/// Profiled replays of the one-stream graph; the median of each op's times is kept.
pub const KERNEL_TIMING_REPLAYS: usize = 21;

/// One op's kernels, over the replays.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct OpKernels {
    /// Device activities (kernels, copies, memsets) the op issues.
    pub activities: usize,
    /// Median time some of its activities ran (their union), from the previous op's last end
    /// on, µs (0 without activities): the op's time.
    pub busy_us: f64,
    /// Median span from its first start to its last end, µs: gaps between its kernels
    /// included, and a kernel's wait for the previous op (programmatic dependent launch).
    pub span_us: f64,
    /// Its kernels' SM shares weighted by their duration, when any kernel's launch is known.
    pub sm_share: Option<f64>,
}

/// Splits `activities` (all of `replays` replays of a one-stream graph of `nodes` nodes, in
/// start order) by replay and gives each op its nodes' times (`ranges`: per op, its nodes, or
/// `None` for an op outside the capture), taking each replay's activities in start order.
pub(crate) fn op_kernels(
    activities: &[Activity],
    nodes: usize,
    replays: usize,
    ranges: &[Option<Range<usize>>],
    sm: &SmLimits,
) -> Result<Vec<OpKernels>> {
    let fail = |what: String| Err(NimbleError::Internal(format!("kernel timing: {what}")));
    if nodes == 0 || activities.len() != nodes * replays {
        return fail(format!(
            "the profile holds {} device activities, expected {replays} replays × {nodes} graph nodes",
            activities.len()
        ));
    }
    if let Some(range) = ranges.iter().flatten().find(|r| r.end > nodes) {
        return fail(format!(
            "an op's nodes {range:?} lie beyond the graph's {nodes}"
        ));
    }
    let runs: Vec<Vec<&Activity>> = activities
        .chunks(nodes)
        .map(|run| {
            let mut run: Vec<&Activity> = run.iter().collect();
            run.sort_by_key(|a| a.start_ns);
            run
        })
        .collect();
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    // Per replay, each op's (span, busy from its predecessor's end), ns.
    let times: Vec<Vec<Option<(u64, u64)>>> = runs
        .iter()
        .map(|run| {
            let mut previous_end = 0;
            ranges
                .iter()
                .map(|range| {
                    let range = range.clone().filter(|r| !r.is_empty())?;
                    let ops = &run[range];
                    let (start, end) = (ops[0].start_ns, ops.iter().map(|a| a.end_ns()).max().unwrap_or(0));
                    let from = previous_end;
                    previous_end = previous_end.max(end);
                    Some((end.saturating_sub(start), union_ns(ops, from)))
                })
                .collect()
        })
        .collect();
    Ok(ranges
        .iter()
        .enumerate()
        .map(|(op, range)| {
            let Some(range) = range.clone().filter(|r| !r.is_empty()) else {
                return OpKernels {
                    activities: 0,
                    busy_us: 0.0,
                    span_us: 0.0,
                    sm_share: None,
                };
            };
            let of = |pick: fn((u64, u64)) -> u64| median(times.iter().map(|run| run[op].map_or(0, pick) as f64 / 1e3).collect());
            let (mut weighted, mut weight) = (0.0, 0.0);
            for a in &runs[0][range.clone()] {
                if let Some(launch) = a.launch {
                    let w = a.duration_ns.max(1) as f64;
                    weighted += w * launch.sm_share(sm);
                    weight += w;
                }
            }
            OpKernels {
                activities: range.len(),
                busy_us: of(|t| t.1),
                span_us: of(|t| t.0),
                sm_share: (weight > 0.0).then(|| weighted / weight),
            }
        })
        .collect())
}

/// Nanoseconds from `from` on during which at least one of `activities` (in start order) ran.
fn union_ns(activities: &[&Activity], from: u64) -> u64 {
    let (mut total, mut covered_to) = (0, from);
    for a in activities {
        let (start, end) = (a.start_ns.max(covered_to), a.end_ns());
        if end > start {
            total += end - start;
            covered_to = end;
        }
    }
    total
}

/// Checks that the capture keeps ops in order: no edge of the captured graph (`edges`, node
/// pairs) leads from a node of a later op to one of an earlier op (`ranges`: per op, its nodes).
/// Then, in any replay, op `k`'s nodes all start before op `k + 1`'s first.
pub(crate) fn ops_in_capture_order(nodes: usize, edges: &[(usize, usize)], ranges: &[Option<Range<usize>>]) -> Result<()> {
    let mut op_of = vec![None; nodes];
    for (op, range) in ranges.iter().enumerate() {
        for node in range.clone().into_iter().flatten().filter(|&n| n < nodes) {
            op_of[node] = Some(op);
        }
    }
    if let Some(&(u, v)) = edges.iter().find(|&&(u, v)| matches!((op_of.get(u), op_of.get(v)), (Some(Some(a)), Some(Some(b))) if a > b)) {
        return Err(NimbleError::Internal(format!(
            "kernel timing: the one-stream capture has an edge from node {u} (op {}) back to node {v} (op {}); expected ops one after another",
            op_of[u].unwrap_or_default(),
            op_of[v].unwrap_or_default()
        )));
    }
    Ok(())
}

/// `graph` (node ids are trace positions) with each op's kernel-derived time as `duration_us`
/// and attributes `kernel_span_us` (first start to last end), `kernels` (device activities),
/// `sm_share` (when known) and `event_us` (the event-timed duration it had, if any). See the module documentation.
pub(crate) fn kernel_timed_graph(
    trace: &Trace,
    graph: &TaskGraph,
    device: usize,
    runner: &Runner<'_>,
    inputs: &[Tensor],
    capture_mode: CaptureMode,
) -> Result<TaskGraph> {
    let schedule = single_stream_schedule(trace, Some(device), OpTiming::CapturedNodes)?;
    let cuda_graph = CudaGraph::new()?;
    scheduled_run(
        &schedule,
        Some((&cuda_graph, capture_mode)),
        0,
        runner,
        inputs,
        false,
        "kernel timing",
    )?;
    cuda_graph.instantiate()?;
    let ranges = schedule.node_ranges()?;
    let structure = cuda_graph.structure()?;
    let nodes = structure.node_types.len();
    if let Some(other) = structure
        .node_types
        .iter()
        .find(|t| !matches!(t.as_str(), "kernel" | "memcpy" | "memset"))
    {
        return Err(NimbleError::Internal(format!("kernel timing: the one-stream capture holds a `{other}` node, which the profiler does not report")));
    }
    ops_in_capture_order(nodes, &structure.edges, &ranges)?;
    for _ in 0..3 {
        cuda_graph.replay()?;
    }
    ffi::cuda_synchronize()?;
    let sm = SmLimits::of_device(device)?;
    let ((), device_profile) = profile(None, || {
        for _ in 0..KERNEL_TIMING_REPLAYS {
            cuda_graph.replay()?;
            ffi::cuda_synchronize()?;
        }
        Ok(())
    })?;
    let ops = op_kernels(
        &device_profile.activities,
        nodes,
        KERNEL_TIMING_REPLAYS,
        &ranges,
        &sm,
    )?;
    let timed = graph.with_updated_nodes(|index, duration, attrs| {
        let op = &ops[graph.id_of(index) as usize];
        if let Some(event_us) = *duration {
            attrs.insert("event_us".into(), json!(event_us));
        }
        *duration = Some(op.busy_us);
        attrs.insert("kernel_span_us".into(), json!(op.span_us));
        attrs.insert("kernels".into(), json!(op.activities));
        match op.sm_share {
            Some(share) => attrs.insert("sm_share".into(), json!(share.clamp(1e-4, 1.0))),
            None => attrs.remove("sm_share"),
        };
    })?;
    Ok(timed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ActivityKind, KernelLaunch};

    const SM: SmLimits = SmLimits {
        multiprocessors: 100,
        max_threads: 2048,
        max_blocks: 32,
        registers: 65536,
        shared_memory: 200_000,
    };

    fn kernel(start: u64, duration: u64, blocks: u64) -> Activity {
        let launch = KernelLaunch {
            grid: [blocks, 1, 1],
            block: [1024, 1, 1],
            registers_per_thread: 0,
            shared_memory: 0,
        };
        Activity {
            kind: ActivityKind::Kernel,
            name: "k".into(),
            start_ns: start,
            duration_ns: duration,
            stream: 7,
            launch: Some(launch),
        }
    }

    #[test]
    fn ops_get_their_own_nodes_busy_times_and_spans_median_over_replays() {
        // Three nodes: op 0 has nodes 0..2 (two kernels with a 1 µs gap), op 1 none, op 2 node 2.
        let replay = |t: u64, slow: u64| {
            vec![
                kernel(t, 2_000 + slow, 50),
                kernel(t + 3_000 + slow, 1_000, 200),
                kernel(t + 5_000 + slow, 4_000, 100),
            ]
        };
        let activities: Vec<Activity> =
            [replay(0, 0), replay(100_000, 500), replay(200_000, 0)].concat();
        let ranges = vec![Some(0..2), None, Some(2..3)];
        let ops = op_kernels(&activities, 3, 3, &ranges, &SM).unwrap();
        assert_eq!(ops[0].activities, 2);
        assert!((ops[0].span_us - 4.0).abs() < 1e-9, "{:?}", ops[0]);
        assert!((ops[0].busy_us - 3.0).abs() < 1e-9, "{:?}", ops[0]);
        // 2 blocks of 1024 threads per SM, 200 resident: 50 blocks are a quarter, 200 all.
        let share = (2_000.0 * 0.25 + 1_000.0 * 1.0) / 3_000.0;
        assert!(
            (ops[0].sm_share.unwrap() - share).abs() < 1e-9,
            "{:?}",
            ops[0]
        );
        assert_eq!(
            ops[1],
            OpKernels {
                activities: 0,
                busy_us: 0.0,
                span_us: 0.0,
                sm_share: None
            }
        );
        assert!(
            (ops[2].span_us - 4.0).abs() < 1e-9 && (ops[2].sm_share.unwrap() - 0.5).abs() < 1e-9
        );
    }

    #[test]
    fn a_profile_that_does_not_match_the_graph_is_an_error() {
        let activities = vec![kernel(0, 10, 1), kernel(20, 10, 1), kernel(40, 10, 1)];
        let error = op_kernels(&activities, 2, 2, &[Some(0..2)], &SM)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("3 device activities, expected 2 replays × 2 graph nodes"),
            "{error}"
        );
        let error = op_kernels(&activities[..2], 2, 1, &[Some(0..3)], &SM)
            .unwrap_err()
            .to_string();
        assert!(error.contains("beyond the graph's 2"), "{error}");
    }

    /// An op that forks (two kernels at once on another stream, reported out of start order)
    /// gets the span and the union of its kernels; a kernel that starts before its
    /// predecessor ends (programmatic dependent launch) still counts for its own op, from the
    /// predecessor's end on.
    #[test]
    fn forked_and_overlapping_kernels_are_assigned_by_start() {
        let mut branch = kernel(2_000, 5_000, 10);
        branch.stream = 9;
        // Op 0: kernels at [0, 3000) and, forked, [2000, 7000); op 1: [6500, 8000).
        let activities = vec![kernel(0, 3_000, 10), kernel(6_500, 1_500, 10), branch];
        let ops = op_kernels(&activities, 3, 1, &[Some(0..2), Some(2..3)], &SM).unwrap();
        assert!((ops[0].span_us - 7.0).abs() < 1e-9 && (ops[0].busy_us - 7.0).abs() < 1e-9, "{:?}", ops[0]);
        assert!((ops[1].span_us - 1.5).abs() < 1e-9 && (ops[1].busy_us - 1.0).abs() < 1e-9, "{:?}", ops[1]);
        let gap = vec![kernel(0, 1_000, 1), kernel(3_000, 1_000, 1)];
        let ops = op_kernels(&gap, 2, 1, &[Some(0..2)], &SM).unwrap();
        assert!((ops[0].span_us - 4.0).abs() < 1e-9 && (ops[0].busy_us - 2.0).abs() < 1e-9, "{:?}", ops[0]);
    }

    /// A chain of ops each of whose first kernel starts inside the previous op's last: the ops'
    /// times add up to the replay, their spans to more.
    #[test]
    fn early_starts_are_counted_once_so_the_times_add_up_to_the_replay() {
        // Op 0: [0, 1000); op k > 0: [k * 1000 - 300, (k + 1) * 1000); twice.
        let replay = |t: u64| (0..4u64).map(|k| kernel(t + (k * 1_000).saturating_sub(300 * k.min(1)), if k == 0 { 1_000 } else { 1_300 }, 10)).collect::<Vec<_>>();
        let activities = [replay(0), replay(50_000)].concat();
        let ranges: Vec<_> = (0..4).map(|k| Some(k..k + 1)).collect();
        let ops = op_kernels(&activities, 4, 2, &ranges, &SM).unwrap();
        let (times, spans): (f64, f64) = (ops.iter().map(|o| o.busy_us).sum(), ops.iter().map(|o| o.span_us).sum());
        assert!((times - 4.0).abs() < 1e-9 && (spans - 4.9).abs() < 1e-9, "{ops:?}");
        assert!(ops.iter().all(|o| (o.busy_us - 1.0).abs() < 1e-9), "{ops:?}");
    }

    #[test]
    fn a_capture_must_keep_ops_in_order() {
        let ranges = vec![Some(0..3), None, Some(3..4)];
        // Op 0 forks (0 -> 1, 0 -> 2) and joins into op 2's node 3.
        assert!(ops_in_capture_order(4, &[(0, 1), (0, 2), (1, 3), (2, 3)], &ranges).is_ok());
        let error = ops_in_capture_order(4, &[(0, 1), (3, 2)], &ranges).unwrap_err().to_string();
        assert!(error.contains("from node 3 (op 2) back to node 2 (op 0)"), "{error}");
    }
}
