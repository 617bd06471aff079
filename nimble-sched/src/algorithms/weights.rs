//! What the algorithms weigh: a task's cost (one rule for all of them) and its distance to the exit.

use nimble_graph::TaskGraph;

/// A task's cost: its `duration_us`, or 1 when the graph carries none (then paths are weighed
/// by their task counts). Negative durations count as 0.
pub(crate) fn weight(graph: &TaskGraph, v: usize) -> f64 {
    graph.node(v).duration_us.map_or(1.0, |d| d.max(0.0))
}

/// HEFT's upward rank of every task: its weight plus the largest upward rank among its
/// successors (no communication cost: streams share the device's memory), i.e. the weight of
/// the heaviest path from the task to an exit.
///
/// # Complexity
/// O(V + E).
pub(crate) fn upward_rank(graph: &TaskGraph) -> Vec<f64> {
    let mut rank = vec![0.0f64; graph.len()];
    for &v in graph.topological_order().iter().rev() {
        let below = graph.successors(v).iter().map(|&w| rank[w]).fold(0.0, f64::max);
        rank[v] = weight(graph, v) + below;
    }
    rank
}
