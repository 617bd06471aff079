//! The floor: the latency no stream assignment can beat on a model.
//!
//! A model's task graph, with each op's duration taken from its own kernels in a one-stream
//! replay (`Nimble::kernel_timed_graph`), has a critical path: a chain of ops each of which
//! must wait for the one before. However the ops are spread over streams, a forward takes at
//! least that long (the launch of the graph and the kernels' own ramp-up come on top). Nimble's
//! measured latency over it is the headroom left to scheduling research: 1.0 would be a perfect
//! assignment on an idle GPU with free synchronization.

use nimble_graph::TaskGraph;

use crate::inference::{prepare_checked, InferConfig, InferMode, InferRow, Subject};

pub use crate::inference::Floor;

/// The floor of the Nimble graph measured in `row`: `model` prepared again as that row was
/// (its algorithm, rewrites and layout), its ops' kernels timed, and the critical path taken.
/// Returns the kernel-timed graph too. Loads the profiler, which slows later launches in the
/// process: call it after every measurement.
///
/// # Errors
/// When `row` is not a Nimble row or the model cannot be prepared or timed on CUDA.
pub fn measure_floor(model: &dyn Subject, config: &InferConfig, row: &InferRow) -> nimble_torch::Result<(Floor, TaskGraph)> {
    if row.mode != InferMode::Nimble {
        return Err(nimble_torch::NimbleError::InvalidInput(format!("the floor is measured for Nimble rows, not {} ones", row.mode.name())));
    }
    let graph = kernel_timed_graph(model, config, row.channels_last, row.optimized)?;
    Ok((Floor::of(&graph, row.latency.median_us)?, graph))
}

/// `model`'s task graph as Nimble prepares it with `config` (its algorithm and rewrites), in the
/// given layout and with or without the rewrites, checked against eager as the timed graph was
/// (in exact float32 with `config.exact_check`), with each op's time from its own kernels
/// (`Nimble::kernel_timed_graph`). Loads the profiler: call it after every measurement.
pub fn kernel_timed_graph(model: &dyn Subject, config: &InferConfig, channels_last: bool, optimized: bool) -> nimble_torch::Result<TaskGraph> {
    let config = InferConfig { channels_last: Some(channels_last), ..config.clone() };
    let (nimble, _, _) = prepare_checked(model, &config, InferMode::Nimble, optimized)?;
    nimble.kernel_timed_graph()
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimble_graph::SyntheticSpec;

    #[test]
    fn floor_is_the_critical_path_against_the_latency() {
        // Four branches of three tasks between a source and a sink.
        let graph = SyntheticSpec::Fan { branches: 4, depth: 3 }.generate();
        let path = graph.critical_path();
        let floor = Floor::of(&graph, 2.0 * path.length_us).expect("durations");
        assert_eq!(floor.floor_us, path.length_us);
        assert!((floor.over_floor - 2.0).abs() < 1e-12);
        assert_eq!((floor.path_tasks, floor.tasks), (5, 14));
        let work: f64 = graph.nodes().iter().filter_map(|n| n.duration_us).sum();
        assert!(floor.kernel_time_us == work && work > floor.floor_us);
    }

    #[test]
    fn a_graph_without_durations_has_no_floor() {
        let graph = TaskGraph::from_json_str(r#"{"nodes": [{"id": 0, "op": "a"}, {"id": 1, "op": "b", "inputs": [0]}]}"#).expect("a valid graph");
        let error = Floor::of(&graph, 10.0).expect_err("no durations").to_string();
        assert!(error.contains("kernel-timed") && error.contains("2 tasks"), "{error}");
    }
}
