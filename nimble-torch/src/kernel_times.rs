//! Each op's GPU time from its own kernels, for a task graph that makes the simulator right.
//!
//! The forward is captured on one stream into a CUDA graph while the shim counts, per op, the
//! nodes the capture gained while the op ran; a one-stream capture is a chain, so op `k`'s
//! nodes are a contiguous run of it. The graph is then replayed under the device profiler
//! (Kineto/CUPTI), whose kernels, copies and memsets come back in node order, and op `k`'s time
//! is the median over replays of the span from its first kernel's start to its last one's
//! end: the GPU's own time for the op, gaps between its kernels included, without the
//! microsecond or two that an event pair around each op adds. Each op also gets its kernel
//! count and an `sm_share` (how much of the GPU its grids fill, kernels weighted by time).
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
    /// Median span, first start to last end, µs (0 without activities).
    pub span_us: f64,
    /// Median time some of its activities ran (the union), µs.
    pub busy_us: f64,
    /// Its kernels' SM shares weighted by their duration, when any kernel's launch is known.
    pub sm_share: Option<f64>,
}

/// Splits `activities` (all of `replays` replays of a one-stream graph of `nodes` nodes, in
/// start order) by replay and gives each op its nodes' times (`ranges`: per op, its nodes, or
/// `None` for an op outside the capture).
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
    let runs: Vec<&[Activity]> = activities.chunks(nodes).collect();
    for run in &runs {
        if run.iter().any(|a| a.stream != run[0].stream) {
            return fail("a replay of the one-stream graph ran on several streams".into());
        }
        if run.windows(2).any(|w| w[1].start_ns < w[0].end_ns()) {
            return fail("activities of the one-stream graph overlapped".into());
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    Ok(ranges
        .iter()
        .map(|range| {
            let Some(range) = range.clone().filter(|r| !r.is_empty()) else {
                return OpKernels {
                    activities: 0,
                    span_us: 0.0,
                    busy_us: 0.0,
                    sm_share: None,
                };
            };
            let span = runs
                .iter()
                .map(|run| (run[range.end - 1].end_ns() - run[range.start].start_ns) as f64 / 1e3)
                .collect();
            let busy = runs
                .iter()
                .map(|run| {
                    run[range.clone()]
                        .iter()
                        .map(|a| a.duration_ns)
                        .sum::<u64>() as f64
                        / 1e3
                })
                .collect();
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
                span_us: median(span),
                busy_us: median(busy),
                sm_share: (weight > 0.0).then(|| weighted / weight),
            }
        })
        .collect())
}

/// `graph` (node ids are trace positions) with each op's kernel-derived time as `duration_us`
/// and attributes `kernels` (device activities), `kernel_busy_us`, `sm_share` (when known) and
/// `event_us` (the event-timed duration it had, if any). See the module documentation.
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
    let chain =
        structure.edges.len() + 1 == nodes && structure.edges.iter().all(|&(u, v)| v == u + 1);
    if !chain {
        return Err(NimbleError::Internal(
            "kernel timing: the one-stream capture is not a chain in node order".into(),
        ));
    }
    for _ in 0..3 {
        cuda_graph.replay()?;
    }
    ffi::cuda_synchronize()?;
    let sm = ffi::sm_limits(device)?;
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
        *duration = Some(op.span_us);
        attrs.insert("kernels".into(), json!(op.activities));
        attrs.insert("kernel_busy_us".into(), json!(op.busy_us));
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
    fn ops_get_their_own_nodes_spans_gaps_included_median_over_replays() {
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
                span_us: 0.0,
                busy_us: 0.0,
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
        let mut other_stream = activities[..2].to_vec();
        other_stream[1].stream = 8;
        assert!(op_kernels(&other_stream, 2, 1, &[Some(0..2)], &SM)
            .unwrap_err()
            .to_string()
            .contains("several streams"));
        let overlapping = vec![kernel(0, 30, 1), kernel(20, 10, 1)];
        assert!(op_kernels(&overlapping, 2, 1, &[Some(0..2)], &SM)
            .unwrap_err()
            .to_string()
            .contains("overlapped"));
    }
}
