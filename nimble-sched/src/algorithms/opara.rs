//! `opara`: Opara's stream allocation and its alternating launch order.

use std::collections::VecDeque;

use nimble_graph::TaskGraph;

use crate::{Analysis, StreamAssigner, StreamPlan};

/// Streams: in topological order, a task takes the stream of its first producer (in listed
/// order) whose stream no other consumer has taken yet, and opens a new stream when every
/// producer's has been taken (or it has none). Launch order: among the ready tasks, one
/// compute-bound and one memory-bound in turn (each kind first-ready first), so that kernels
/// that contend for the same resource are not launched back to back.
///
/// From Opara (Chen et al., "Opara: Exploiting Operator Parallelism for Expediting DNN Inference
/// on GPUs", IEEE TPDS 2024): its stream allocator and its resource-aware launch order. Opara
/// profiles each operator's arithmetic intensity; a graph here says what bounds a task by a
/// `bound` attribute (`"compute"` or `"memory"`), else by its kind: Inductor's extern and
/// template kernels and operators named like convolutions, matrix products and attention are
/// compute-bound, the rest (pointwise, reductions, copies) memory-bound. `greedy` is the
/// stream rule alone, with the first producer only and the graph's own order.
///
/// # Complexity
/// O(V + E) beyond the analysis, plus the sync computation.
pub struct Opara;

impl StreamAssigner for Opara {
    fn name(&self) -> String {
        "opara".into()
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let n = graph.len();
        let mut stream_of = vec![0; n];
        let mut taken = vec![false; n];
        let mut streams = 0;
        for &v in graph.topological_order() {
            stream_of[v] = match graph.predecessors(v).iter().find(|&&u| !taken[u]) {
                Some(&u) => {
                    taken[u] = true;
                    stream_of[u]
                }
                None => {
                    streams += 1;
                    streams - 1
                }
            };
        }
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, Some(alternating_order(graph)))
    }
}

/// Whether a task is compute-bound, as [`Opara`] describes.
pub fn compute_bound(graph: &TaskGraph, v: usize) -> bool {
    let node = graph.node(v);
    match node.attrs.get("bound").and_then(|b| b.as_str()) {
        Some("compute") => return true,
        Some("memory") => return false,
        _ => {}
    }
    if matches!(node.attrs.get("kind").and_then(|k| k.as_str()), Some("extern" | "template")) {
        return true;
    }
    let op = node.op.to_ascii_lowercase();
    ["conv", "mm", "matmul", "gemm", "linear", "attention", "sdpa", "einsum"].iter().any(|name| op.contains(name))
}

/// Kahn's algorithm with two ready queues, taking from the compute-bound and the memory-bound
/// one in turn (from the other when one is empty).
fn alternating_order(graph: &TaskGraph) -> Vec<usize> {
    let n = graph.len();
    let mut waiting: Vec<usize> = (0..n).map(|v| graph.predecessors(v).len()).collect();
    let mut ready = [VecDeque::new(), VecDeque::new()];
    for &v in graph.topological_order() {
        if waiting[v] == 0 {
            ready[usize::from(compute_bound(graph, v))].push_back(v);
        }
    }
    let mut order = Vec::with_capacity(n);
    let mut turn = 1;
    while order.len() < n {
        let Some(v) = ready[turn].pop_front().or_else(|| ready[1 - turn].pop_front()) else {
            break;
        };
        turn = 1 - usize::from(compute_bound(graph, v));
        order.push(v);
        for &w in graph.successors(v) {
            waiting[w] -= 1;
            if waiting[w] == 0 {
                ready[usize::from(compute_bound(graph, w))].push_back(w);
            }
        }
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimble_graph::{Node, TaskGraphBuilder};

    /// Six independent tasks, three convolutions listed first: launched conv, add, conv, add, …
    #[test]
    fn launches_alternate_compute_and_memory_bound_tasks() {
        let mut builder = TaskGraphBuilder::new();
        for (id, op) in [(0, "aten::convolution"), (1, "aten::convolution"), (2, "aten::mm"), (3, "triton_poi_fused_add_0"), (4, "aten::relu"), (5, "triton_red_fused_sum_1")] {
            builder.add_node(Node::new(id, op)).expect("a new id");
        }
        let graph = builder.build().expect("a DAG");
        let analysis = Analysis::new(&graph);
        let plan = Opara.assign(&analysis);
        let bound: Vec<bool> = plan.order.iter().map(|&v| compute_bound(&graph, v)).collect();
        assert_eq!(bound, vec![true, false, true, false, true, false], "order {:?}", plan.order);
    }

    /// 0 feeds 1 and 2; 1 feeds 3, and 3 also reads 0: 1 takes 0's stream, 2 opens one, and 3
    /// takes 1's (0's is taken), so no task is left without a stream it could have inherited.
    #[test]
    fn a_task_takes_its_first_producer_whose_stream_is_free() {
        let mut builder = TaskGraphBuilder::new();
        for id in 0..5 {
            builder.add_node(Node::new(id, "op")).expect("a new id");
        }
        for (u, v) in [(0, 1), (0, 2), (0, 3), (1, 3), (2, 4), (3, 4)] {
            builder.add_edge(u, v).expect("known ids");
        }
        let graph = builder.build().expect("a DAG");
        let analysis = Analysis::new(&graph);
        let plan = Opara.assign(&analysis);
        let stream = |id| plan.stream_of[graph.index_of(id).expect("a node")];
        assert_eq!(stream(1), stream(0));
        assert_ne!(stream(2), stream(0));
        assert_eq!(stream(3), stream(1), "3's first producer 0 is taken, its next, 1, is free");
        assert_eq!(stream(4), stream(2), "4's first producer 2 is free");
        assert_eq!(plan.streams, 2);
    }
}
