//! The simulator's data-parallel projection: a model's training step on N GPUs, from its
//! forward task graph, its measured one-GPU step and the all-reduce model of the interconnect.
//!
//! ```text
//! forward graph (measured per-op times, the ops' parameters)
//!   └─ nimble_graph::step::training_step  → forward, loss, backward, optimizer (+ all-reduces)
//! calibrate   one scale for every compute node, so that the one-GPU step simulates to the
//!             measured one (the forward's per-op times come from events around each op, which
//!             add to small ops, and the backward is taken as `backward_factor` × its forward)
//! project     N GPUs: the same compute, plus one all-reduce per DDP bucket priced by the ring
//!             model (latency + 2(N−1)/N · bytes / bus bandwidth), planned by the algorithm
//!             (Nimble puts the all-reduces on a stream of their own) and simulated as a graph
//! contention  while an all-reduce runs, the compute beside it runs `collective_slowdown` times
//!             slower (NCCL's kernels take SMs and memory bandwidth), through the simulator's
//!             sharing rule: compute kernels take half the GPU (two run at full speed), an
//!             all-reduce `collective_slowdown − ½`
//! optimizer   each optimizer node (one on one GPU, one per bucket data parallel, after the
//!             backward and its bucket's all-reduce) takes its parameters' bytes over
//!             `optimizer_bytes_per_us`, outside the calibration's scale: the earlier buckets'
//!             updates run beside the last all-reduces, as the executor runs them
//! ```
//!
//! What it leaves out: packing a bucket into one buffer, the ranks' variation, and which kernels
//! contend more than others (one factor for every compute kernel).

use nimble_graph::step::{training_step, StepOptions, TrainingStep};
use nimble_graph::TaskGraph;
use nimble_sched::{algorithms, simulate, Analysis, SimulatorConfig};
use serde::{Deserialize, Serialize};

use crate::scaling::AllReduceModel;

/// One GPU count's simulated step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProjectedStep {
    pub gpus: usize,
    pub step_us: f64,
    /// Over all GPUs.
    pub samples_per_s: f64,
    pub buckets: usize,
    /// The all-reduces' time added up (they overlap the backward and each other's gaps).
    pub all_reduce_us: f64,
    /// The step's growth over one GPU: the communication the plan does not hide.
    pub exposed_us: f64,
    pub streams: usize,
}

/// A model's projection over GPU counts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Projection {
    pub batch: i64,
    pub algorithm: String,
    /// The measured one-GPU step it is calibrated to, µs.
    pub one_gpu_us: f64,
    /// What every compute node's duration was multiplied by.
    pub compute_scale: f64,
    pub steps: Vec<ProjectedStep>,
}

impl Projection {
    /// The projected step on `gpus` GPUs.
    pub fn at(&self, gpus: usize) -> Option<&ProjectedStep> {
        self.steps.iter().find(|s| s.gpus == gpus)
    }
}

/// How the step graph is built and priced.
#[derive(Clone, Copy, Debug)]
pub struct ProjectionOptions {
    /// DDP's bucket sizes, bytes: the first, the others.
    pub buckets: (usize, usize),
    pub backward_factor: f64,
    pub all_reduce: AllReduceModel,
    /// How much slower compute runs beside an all-reduce, in [1, 1.5] (1: not at all).
    pub collective_slowdown: f64,
    /// Parameter bytes the fused optimizer updates per µs (0: the update takes no time, its
    /// cost folded into the compute's scale as before the optimizer was priced).
    pub optimizer_bytes_per_us: f64,
}

/// The fused SGD (momentum, weight decay) updated ResNet-50's 94.1 MB of parameters in 152 µs on
/// an H200 (`paper-figs/results/reducer-one-rank-95cf27b/kernel-summary-resnet50-b32.json`).
pub const H200_SGD_BYTES_PER_US: f64 = 94.1e6 / 152.0;

/// The compute kernels' share of the GPU under contention: two of them run at full speed.
const COMPUTE_SHARE: f64 = 0.5;

/// The most `collective_slowdown` the sharing rule expresses (an all-reduce takes at most the
/// whole GPU).
pub const MAX_COLLECTIVE_SLOWDOWN: f64 = 1.0 + COMPUTE_SHARE;

/// The step's simulated makespan and streams; an error when a priced node would last longer than
/// a task may (an optimizer speed or a measured step far out of range).
fn simulate_step(step: &TrainingStep, assigner: &dyn nimble_sched::StreamAssigner, scale: f64, options: &ProjectionOptions, gpus: usize) -> Result<(f64, usize), String> {
    let mut collective_bytes = vec![None; step.graph.len()];
    for (&c, (_, bytes)) in step.collectives.iter().zip(&step.buckets) {
        collective_bytes[c] = Some(*bytes as f64);
    }
    // Each optimizer node's parameter bytes: its bucket's, or all of them.
    let mut optimizer_bytes = vec![None; step.graph.len()];
    let all: usize = step.parameters.iter().map(|p| p.bytes).sum();
    for (b, &o) in step.optimizers.iter().enumerate() {
        optimizer_bytes[o] = Some(step.buckets.get(b).map_or(all, |(_, bytes)| *bytes) as f64);
    }
    let contended = options.collective_slowdown > 1.0;
    let graph = step
        .graph
        .with_updated_nodes(|v, duration, attrs| {
            *duration = match (collective_bytes[v], optimizer_bytes[v]) {
                (Some(bytes), _) => Some(options.all_reduce.time_us(bytes, gpus)),
                (None, Some(bytes)) if options.optimizer_bytes_per_us > 0.0 => Some(bytes / options.optimizer_bytes_per_us),
                _ => duration.map(|d| d * scale),
            };
            if contended {
                let share = if collective_bytes[v].is_some() { options.collective_slowdown - COMPUTE_SHARE } else { COMPUTE_SHARE };
                attrs.insert("sm_share".into(), serde_json::json!(share));
            }
        })
        .map_err(|e| {
            format!(
                "the step cannot be priced on {gpus} GPU(s): {e} (an optimizer speed of {} GB/s, a collective slowdown of {}, compute scaled by {scale:.3e}); expected an optimizer speed and a measured step that keep every task under {} µs",
                options.optimizer_bytes_per_us / 1e3,
                options.collective_slowdown,
                nimble_graph::MAX_DURATION_US
            )
        })?;
    let analysis = Analysis::new(&graph);
    let plan = assigner.assign(&analysis);
    Ok((simulate(&graph, &plan, &SimulatorConfig::for_graph(nimble_sched::LaunchMode::Graph, &graph)).makespan_us, plan.streams))
}

/// Projects `forward`'s training step at per-GPU `batch` to each of `gpus` (see the module
/// documentation), calibrated to the measured one-GPU step `one_gpu_us`.
pub fn project(forward: &TaskGraph, batch: i64, one_gpu_us: f64, gpus: &[usize], algorithm: &str, options: &ProjectionOptions) -> Result<Projection, String> {
    if !(one_gpu_us.is_finite() && one_gpu_us > 0.0) {
        return Err(format!("a measured one-GPU step of {one_gpu_us} µs; expected a positive time"));
    }
    if let Some(&bad) = gpus.iter().find(|&&n| n == 0) {
        return Err(format!("{bad} GPUs; expected at least one"));
    }
    let measured = forward.nodes().iter().filter(|n| n.duration_us.is_some_and(|d| d > 0.0)).count();
    if measured == 0 {
        return Err("the forward graph has no measured durations; export it from a model prepared with measure_durations on".into());
    }
    if !(1.0..=MAX_COLLECTIVE_SLOWDOWN).contains(&options.collective_slowdown) {
        return Err(format!("a collective slowdown of {}; expected 1 (none) to {MAX_COLLECTIVE_SLOWDOWN}", options.collective_slowdown));
    }
    if !(options.optimizer_bytes_per_us.is_finite() && options.optimizer_bytes_per_us >= 0.0) {
        return Err(format!("an optimizer speed of {} bytes/µs; expected a number ≥ 0 (0: the update takes no time)", options.optimizer_bytes_per_us));
    }
    let assigner = algorithms::by_name(algorithm).map_err(|e| e.to_string())?;
    let single = training_step(forward, &StepOptions { buckets: None, backward_factor: options.backward_factor }).map_err(|e| e.to_string())?;
    let parallel = training_step(forward, &StepOptions { buckets: Some(options.buckets), backward_factor: options.backward_factor }).map_err(|e| e.to_string())?;
    // The makespan grows with the scale almost linearly (launch and dependency latencies are
    // fixed), so a few fixed-point steps settle it.
    let mut scale = 1.0;
    for _ in 0..20 {
        let (simulated, _) = simulate_step(&single, assigner.as_ref(), scale, options, 1)?;
        let next = scale * one_gpu_us / simulated;
        let settled = (next - scale).abs() <= 1e-9 * scale;
        scale = next;
        if settled {
            break;
        }
    }
    let (base, base_streams) = simulate_step(&single, assigner.as_ref(), scale, options, 1)?;
    let steps = gpus
        .iter()
        .map(|&n| {
            let (step_us, streams, all_reduce_us, buckets) = if n == 1 {
                (base, base_streams, 0.0, 0)
            } else {
                let (us, streams) = simulate_step(&parallel, assigner.as_ref(), scale, options, n)?;
                let total = parallel.buckets.iter().map(|(_, bytes)| options.all_reduce.time_us(*bytes as f64, n)).sum();
                (us, streams, total, parallel.buckets.len())
            };
            Ok(ProjectedStep { gpus: n, step_us, samples_per_s: n as f64 * batch as f64 / step_us * 1e6, buckets, all_reduce_us, exposed_us: step_us - base, streams })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Projection { batch, algorithm: algorithm.into(), one_gpu_us, compute_scale: scale, steps })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimble_graph::{Node, TaskGraphBuilder};
    use serde_json::json;

    /// A chain of `n` ops of 10 µs, each reading a parameter of `bytes`.
    fn chain(n: u64, bytes: usize) -> TaskGraph {
        let mut b = TaskGraphBuilder::new();
        for i in 0..n {
            let mut node = Node::new(i, "aten::linear").with_duration(10.0);
            node.attrs.insert("params".into(), json!([{"index": i, "bytes": bytes, "dtype": "Float"}]));
            b.add_node(node).unwrap();
            if i > 0 {
                b.add_edge(i - 1, i).unwrap();
            }
        }
        b.build().unwrap()
    }

    fn options(bus_bytes_per_us: f64) -> ProjectionOptions {
        ProjectionOptions { buckets: (1000, 4000), backward_factor: 2.0, all_reduce: AllReduceModel { latency_us: 20.0, bus_bytes_per_us }, collective_slowdown: 1.0, optimizer_bytes_per_us: 0.0 }
    }

    /// With the optimizer priced, the one-GPU step stays the measured one (the compute's scale
    /// shrinks to make room for the update), and on two GPUs the earlier buckets' updates run
    /// beside the last all-reduce instead of after it.
    #[test]
    fn a_priced_optimizer_overlaps_the_last_all_reduces() {
        let forward = chain(40, 1000);
        let free = project(&forward, 32, 3000.0, &[1, 2], "nimble", &options(1e3)).unwrap();
        // 40 kB at 400 B/µs: a 100 µs update, 95 of it for the buckets before the last.
        let priced = project(&forward, 32, 3000.0, &[1, 2], "nimble", &ProjectionOptions { optimizer_bytes_per_us: 400.0, ..options(1e3) }).unwrap();
        assert!((priced.at(1).unwrap().step_us - 3000.0).abs() < 1e-3, "{priced:?}");
        assert!(priced.compute_scale < free.compute_scale, "{priced:?} {free:?}");
        let (a, b) = (free.at(2).unwrap(), priced.at(2).unwrap());
        assert!(a.exposed_us > 10.0, "{a:?}");
        assert!(b.exposed_us < a.exposed_us - 10.0, "the last all-reduce hides behind the earlier updates: {a:?} {b:?}");
    }

    /// An optimizer so slow that its update would outlast any task is an error naming the
    /// speed, not a panic (`scaling --optimizer-gbs 0.00001` exited 101).
    #[test]
    fn an_optimizer_too_slow_to_price_is_an_error() {
        let forward = chain(40, 1000);
        let error = project(&forward, 32, 3000.0, &[1, 2], "nimble", &ProjectionOptions { optimizer_bytes_per_us: 1e-5, ..options(1e3) }).unwrap_err();
        assert!(error.contains("cannot be priced") && error.contains("optimizer speed of 0.00000001 GB/s"), "{error}");
    }

    /// Compute beside an all-reduce slows down by the factor given: the one-GPU step stays the
    /// measured one, the 2-GPU step grows by about the slowdown of what the all-reduces overlap.
    #[test]
    fn contention_slows_the_compute_beside_the_all_reduces() {
        let forward = chain(40, 1000);
        let free = project(&forward, 32, 3000.0, &[1, 2], "nimble", &options(10_000.0)).unwrap();
        let contended = project(&forward, 32, 3000.0, &[1, 2], "nimble", &ProjectionOptions { collective_slowdown: 1.5, ..options(10_000.0) }).unwrap();
        assert!((contended.at(1).unwrap().step_us - 3000.0).abs() < 1e-3, "{contended:?}");
        let (a, b) = (free.at(2).unwrap(), contended.at(2).unwrap());
        // The all-reduces overlap about all_reduce_us of compute, which now takes half as long again.
        let grown = b.step_us - a.step_us;
        assert!(grown > 0.2 * a.all_reduce_us && grown < 0.8 * a.all_reduce_us, "{a:?} {b:?}");
    }

    #[test]
    fn calibrated_to_one_gpu_and_hiding_what_the_backward_covers() {
        let forward = chain(40, 1000);
        let p = project(&forward, 32, 3000.0, &[1, 2, 8], "nimble", &options(1e6)).unwrap();
        assert!((p.at(1).unwrap().step_us - 3000.0).abs() < 1e-3, "{p:?}");
        assert!(p.compute_scale > 1.0 && p.compute_scale < 2.5, "{}", p.compute_scale);
        // 40 kB in 11 buckets (1 kB, then 4 kB each) at 1 GB/s cost far less than the backward they overlap: only the
        // last bucket (the first layer's gradients) is exposed.
        let two = p.at(2).unwrap();
        assert_eq!(two.buckets, 11);
        assert!(two.exposed_us > 20.0 && two.exposed_us < 60.0, "{two:?}");
        assert!(p.at(8).unwrap().step_us >= two.step_us);
        assert!((two.samples_per_s - 2.0 * 32.0 / two.step_us * 1e6).abs() < 1e-6);
        // On one stream nothing overlaps: every all-reduce adds to the step.
        let serial = project(&forward, 32, 3000.0, &[2], "single", &options(1e6)).unwrap();
        assert!(serial.at(2).unwrap().exposed_us >= two.all_reduce_us - 1.0, "{serial:?} vs {two:?}");
        // A slow interconnect leaves the all-reduces exposed even when they overlap.
        let slow = project(&forward, 32, 3000.0, &[2], "nimble", &options(10.0)).unwrap();
        assert!(slow.at(2).unwrap().exposed_us > 1000.0);
    }

    #[test]
    fn bad_inputs_are_named() {
        let forward = chain(3, 10);
        assert!(project(&forward, 8, 0.0, &[2], "nimble", &options(1e6)).unwrap_err().contains("positive time"));
        assert!(project(&forward, 8, 100.0, &[0], "nimble", &options(1e6)).unwrap_err().contains("at least one"));
        assert!(project(&forward, 8, 100.0, &[2], "nope", &options(1e6)).unwrap_err().contains("nope"));
        let untimed = forward.with_durations(|_, _| None);
        assert!(project(&untimed, 8, 100.0, &[2], "nimble", &options(1e6)).unwrap_err().contains("no measured durations"));
        for slowdown in [0.9, 1.6, f64::NAN] {
            let error = project(&forward, 8, 100.0, &[2], "nimble", &ProjectionOptions { collective_slowdown: slowdown, ..options(1e6) }).unwrap_err();
            assert!(error.contains("expected 1 (none) to 1.5"), "{error}");
        }
        for speed in [-1.0, f64::INFINITY, f64::NAN] {
            let error = project(&forward, 8, 100.0, &[2], "nimble", &ProjectionOptions { optimizer_bytes_per_us: speed, ..options(1e6) }).unwrap_err();
            assert!(error.contains("expected a number ≥ 0"), "{error}");
        }
    }
}
