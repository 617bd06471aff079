//! The fit behind `simulator-report --graphs`: fused-kernel graphs simulated against the
//! backend's in-graph timings, and the simulator's parameters that bring them nearest.
//!
//! The kernel-timed calibration was fitted on ATen-op graphs. Three parameters decide a
//! fused-kernel graph's time: the latency of a dependency on a stream (each kernel's launch
//! and drain behind the one before it), the latency of a dependency between streams, and the
//! least share of the GPU a running kernel takes (how far small kernels overlap). [`fit`] finds
//! them on a grid; the report calls it leave-one-model-out.

use nimble_graph::TaskGraph;
use nimble_sched::{simulate, SimulatorConfig, StreamPlan};

/// One graph's comparison: (simulated, measured) µs on one stream and under the plan.
pub struct Compared {
    pub model: String,
    pub launch_data: bool,
    pub single: (f64, f64),
    pub plan: (f64, f64),
    /// The graph and its two plans, for re-simulating with fitted parameters.
    pub simulated: Simulated,
}

/// A graph with its one-stream plan and nimble's.
pub struct Simulated {
    pub graph: TaskGraph,
    pub single: StreamPlan,
    pub plan: StreamPlan,
}

impl Simulated {
    /// The makespans (one stream, plan), µs, under `config`.
    pub fn makespans(&self, config: &SimulatorConfig) -> (f64, f64) {
        (simulate(&self.graph, &self.single, config).makespan_us, simulate(&self.graph, &self.plan, config).makespan_us)
    }
}

impl Compared {
    pub fn single_error(&self) -> f64 {
        error(self.single.0, self.single.1)
    }

    pub fn plan_error(&self) -> f64 {
        error(self.plan.0, self.plan.1)
    }

    pub fn speedup_error(&self) -> f64 {
        error(self.single.0 / self.plan.0, self.single.1 / self.plan.1)
    }
}

/// The dependency latencies tried, µs (0 to 2 by 0.1); the least SM shares (0, no floor, to 1,
/// a kernel takes the whole GPU, by 0.05); what a dependency between streams costs beyond one on
/// a stream, µs (0 to 10 by 0.25). The latencies' upper ends are the grids' own choice, which a
/// fit landing on them says ([`Fitted::on_grid_edges`]); the share's range is all there is.
const DEPENDENCY_GRID: std::ops::RangeInclusive<u32> = 0..=20;
const SHARE_GRID: std::ops::RangeInclusive<u32> = 0..=20;
const SYNC_EXTRA_GRID: std::ops::RangeInclusive<u32> = 0..=40;

/// The three parameters fitted ([`fit`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fitted {
    /// The latency of a dependency on one stream, µs.
    pub dependency_us: f64,
    /// The latency of a dependency between streams, µs.
    pub sync_us: f64,
    /// The least share of the GPU a running kernel takes.
    pub share: f64,
}

impl Fitted {
    /// As calibrated: the kernel-timed calibration's own values.
    pub fn calibrated() -> Self {
        let c = SimulatorConfig::kernel_timed();
        Fitted { dependency_us: c.graph_dependency_latency_us, sync_us: c.graph_sync_latency_us.unwrap_or(c.graph_dependency_latency_us), share: c.min_sm_share }
    }

    /// The kernel-timed calibration with these values.
    pub fn config(&self) -> SimulatorConfig {
        SimulatorConfig {
            graph_dependency_latency_us: self.dependency_us,
            graph_sync_latency_us: Some(self.sync_us),
            min_sm_share: self.share,
            ..SimulatorConfig::kernel_timed()
        }
    }

    /// The latencies that lie on the upper end of the grid tried (a larger value might fit
    /// better), named, for the report to say so.
    pub fn on_grid_edges(&self) -> Vec<&'static str> {
        let at_end = |value: f64, grid: &std::ops::RangeInclusive<u32>, step: f64| (value / step).round() as u32 >= *grid.end();
        let mut edges = Vec::new();
        if at_end(self.dependency_us, &DEPENDENCY_GRID, 0.1) {
            edges.push("dependency latency");
        }
        if at_end(self.sync_us - self.dependency_us, &SYNC_EXTRA_GRID, 0.25) {
            edges.push("latency between streams");
        }
        edges
    }
}

/// The (median |error|, largest |error|) of `errors`, for ordering fits: the median first.
fn score(errors: &[f64]) -> (f64, f64) {
    median_and_worst(errors).map_or((f64::INFINITY, f64::INFINITY), |(median, worst)| (median, worst.abs()))
}

/// The candidate whose score is least (the first of equals).
fn best<T: Copy>(candidates: impl Iterator<Item = (T, (f64, f64))>) -> Option<T> {
    candidates.min_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal)).map(|(value, _)| value)
}

/// The parameters fitted on `graphs`: the dependency latency that brings the one-stream
/// makespans nearest the one-stream timings (median |error|, then the worst); then, with it,
/// the least SM share and the latency of a dependency between streams that together bring the
/// plans' nearest theirs. One stream has neither concurrency nor syncs, so those two do not
/// change it; what the plans' timings cannot tell apart (a lower share against a dearer sync)
/// is settled by the grid's order, the smaller values first.
pub fn fit(graphs: &[&Compared]) -> Fitted {
    let calibrated = Fitted::calibrated();
    let dependency_us = best(DEPENDENCY_GRID.map(|i| {
        let d = f64::from(i) / 10.0;
        let config = Fitted { dependency_us: d, sync_us: d + calibrated.sync_us - calibrated.dependency_us, ..calibrated }.config();
        (d, score(&graphs.iter().map(|c| error(simulate(&c.simulated.graph, &c.simulated.single, &config).makespan_us, c.single.1)).collect::<Vec<_>>()))
    }))
    .unwrap_or(calibrated.dependency_us);
    let candidates = SHARE_GRID.flat_map(|i| SYNC_EXTRA_GRID.map(move |j| (f64::from(i) / 20.0, f64::from(j) / 4.0)));
    let fitted = best(candidates.map(|(share, extra)| {
        // (Rounded to the nanosecond: 0.8 + 0.4 reads 1.2, not 1.2000000000000002.)
        let fitted = Fitted { dependency_us, sync_us: ((dependency_us + extra) * 1e3).round() / 1e3, share };
        let config = fitted.config();
        (fitted, score(&graphs.iter().map(|c| error(simulate(&c.simulated.graph, &c.simulated.plan, &config).makespan_us, c.plan.1)).collect::<Vec<_>>()))
    }));
    fitted.unwrap_or(Fitted { dependency_us, ..calibrated })
}

/// The error of `predicted` against `measured`, %.
pub fn error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured * 100.0
}

/// The median |error| and the error of largest magnitude, or none for no errors.
pub fn median_and_worst(errors: &[f64]) -> Option<(f64, f64)> {
    let mut magnitudes: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    magnitudes.sort_by(f64::total_cmp);
    let median = match magnitudes.len() {
        0 => return None,
        n if n % 2 == 1 => magnitudes[n / 2],
        n => (magnitudes[n / 2 - 1] + magnitudes[n / 2]) / 2.0,
    };
    let worst = errors.iter().copied().max_by(|a, b| a.abs().total_cmp(&b.abs()))?;
    Some((median, worst))
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimble_sched::algorithms::{Nimble, Single};
    use nimble_sched::{Analysis, StreamAssigner};

    /// A kernel-timed graph: `branches` chains of `depth` kernels between a fork and a join,
    /// each kernel taking `share` of the GPU.
    fn fork_join(branches: u64, depth: u64, share: f64) -> TaskGraph {
        let mut builder = nimble_graph::TaskGraphBuilder::new();
        let kernel = |id: u64, us: f64, share: f64| {
            let mut node = nimble_graph::Node::new(id, "triton_poi").with_duration(us);
            node.attrs.insert("kernels".into(), serde_json::json!(1));
            node.attrs.insert("sm_share".into(), serde_json::json!(share));
            node
        };
        builder.add_node(kernel(0, 3.0, 1.0)).unwrap();
        let join = 1 + branches * depth;
        builder.add_node(kernel(join, 3.0, 1.0)).unwrap();
        for b in 0..branches {
            for d in 0..depth {
                let id = 1 + b * depth + d;
                builder.add_node(kernel(id, 2.0 + (b + d) as f64, share)).unwrap();
                builder.add_edge(if d == 0 { 0 } else { id - 1 }, id).unwrap();
            }
            builder.add_edge(1 + b * depth + depth - 1, join).unwrap();
        }
        builder.build().unwrap()
    }

    /// Graphs "measured" as the simulator predicts them under `truth`.
    fn measured_under(truth: Fitted) -> Vec<Compared> {
        [(4, 3, 0.1), (2, 6, 0.3), (6, 2, 0.05)]
            .into_iter()
            .enumerate()
            .map(|(i, (branches, depth, share))| {
                let graph = fork_join(branches, depth, share);
                let analysis = Analysis::new(&graph);
                let (single, plan) = (Single.assign(&analysis), Nimble { merge_chains: true }.assign(&analysis));
                let simulated = Simulated { graph, single, plan };
                let (single_us, plan_us) = simulated.makespans(&truth.config());
                Compared { model: format!("m{i}-float32"), launch_data: true, single: (single_us, single_us), plan: (plan_us, plan_us), simulated }
            })
            .collect()
    }

    #[test]
    fn the_fit_finds_parameters_that_reproduce_what_was_measured() {
        let truth = Fitted { dependency_us: 0.3, sync_us: 2.55, share: 0.45 };
        let graphs = measured_under(truth);
        assert!(graphs.iter().all(|c| c.simulated.plan.streams > 1), "the plans run on several streams");
        let fitted = fit(&graphs.iter().collect::<Vec<_>>());
        // One stream has no concurrency: the dependency latency alone decides it.
        assert_eq!(fitted.dependency_us, truth.dependency_us);
        for c in &graphs {
            let (single, plan) = c.simulated.makespans(&fitted.config());
            assert!((single - c.single.1).abs() < 1e-6 && (plan - c.plan.1).abs() < 1e-6, "{fitted:?}: {single} {plan} against {:?} {:?}", c.single, c.plan);
        }
        // A calibration that misses the syncs' cost predicts the plans fast.
        let cheap = Fitted { sync_us: truth.dependency_us, ..truth };
        assert!(graphs.iter().any(|c| c.simulated.makespans(&cheap.config()).1 < c.plan.1 - 1.0));
    }

    #[test]
    fn a_fit_on_the_upper_end_of_a_latency_grid_is_named() {
        assert!(Fitted { dependency_us: 0.6, sync_us: 6.1, share: 0.2 }.on_grid_edges().is_empty());
        // Zero latencies and any share are inside what the parameters can be.
        assert!(Fitted { dependency_us: 0.0, sync_us: 0.0, share: 0.0 }.on_grid_edges().is_empty());
        assert!(Fitted { dependency_us: 0.0, sync_us: 10.0, share: 1.0 }.on_grid_edges() == ["latency between streams"]);
        assert_eq!(Fitted { dependency_us: 2.0, sync_us: 2.5, share: 0.05 }.on_grid_edges(), ["dependency latency"]);
    }
}
