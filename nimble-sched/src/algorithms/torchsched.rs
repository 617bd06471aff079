//! `torchsched`: apex's multi-stream scheduler for Inductor.

use crate::{Analysis, StreamAssigner, StreamPlan};

/// The longest path by task count goes on the default stream (stream 0); every other task, in
/// program order, goes round-robin to the side streams `1..K`.
///
/// From NVIDIA apex's `torchsched` (`apex/contrib/torchsched`, `MultiCudaStreamScheduler`), a
/// `torch.compile` backend that assigns Inductor's fused kernels to CUDA streams this way, with
/// `K = 8` streams unless `TORCH_SCHED_NUM_STREAMS` says otherwise. Depth stands in for cost
/// there, so this policy ignores `duration_us` too. The path is the deepest one from a source;
/// among paths of one depth, the first found in topological order. Launch order: program order
/// (the graph's topological order), as the scheduler emits Inductor's nodes. With `K = 1`
/// everything is on stream 0. Tasks on a side stream are not ordered by dependence, so
/// independent tasks may share one (no maximum logical concurrency), and a branch's tasks
/// scatter over the side streams, each hop a sync.
///
/// # Complexity
/// O(V + E) beyond the analysis, plus the sync computation.
pub struct Torchsched {
    /// Streams, the default one included (at least 1).
    pub streams: usize,
}

impl StreamAssigner for Torchsched {
    fn name(&self) -> String {
        format!("torchsched:{}", self.streams)
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let path = deepest_path(analysis);
        let mut on_path = vec![false; graph.len()];
        for &v in &path {
            on_path[v] = true;
        }
        let side = self.streams.saturating_sub(1);
        let mut next_side = 0;
        let mut stream_of = vec![0; graph.len()];
        for &v in graph.topological_order() {
            if !on_path[v] && side > 0 {
                stream_of[v] = 1 + next_side;
                next_side = (next_side + 1) % side;
            }
        }
        // Stream 0 is the default stream: the path's first task is issued first so that
        // renumbering by first use keeps it 0 (it is a source, hence first in some order).
        let order = path.first().map(|&first| {
            std::iter::once(first).chain(graph.topological_order().iter().copied().filter(|&v| v != first)).collect()
        });
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, order)
    }
}

/// The path with the most tasks, from a source: each task remembers the first predecessor
/// (in listed order) of greatest depth.
fn deepest_path(analysis: &Analysis<'_>) -> Vec<usize> {
    let graph = analysis.graph();
    let n = graph.len();
    let mut depth = vec![0usize; n];
    let mut parent = vec![None; n];
    for &v in graph.topological_order() {
        for &u in graph.predecessors(v) {
            if depth[u] + 1 > depth[v] {
                depth[v] = depth[u] + 1;
                parent[v] = Some(u);
            }
        }
    }
    let Some(&end) = graph.topological_order().iter().max_by(|&&a, &&b| depth[a].cmp(&depth[b]).then(b.cmp(&a))) else {
        return Vec::new();
    };
    let mut path = vec![end];
    while let Some(u) = parent[*path.last().expect("the path is non-empty")] {
        path.push(u);
    }
    path.reverse();
    path
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimble_graph::{Node, TaskGraphBuilder};

    /// A long branch 0→1→2→3→4 and three one-task branches 0→{5,6,7}→4: the long branch is on
    /// the default stream, the short ones round-robin over the side streams.
    #[test]
    fn the_longest_path_stays_on_the_default_stream() {
        let mut builder = TaskGraphBuilder::new();
        for id in 0..8 {
            builder.add_node(Node::new(id, "op")).expect("a new id");
        }
        for (u, v) in [(0, 1), (1, 2), (2, 3), (3, 4), (0, 5), (0, 6), (0, 7), (5, 4), (6, 4), (7, 4)] {
            builder.add_edge(u, v).expect("known ids");
        }
        let graph = builder.build().expect("a DAG");
        let analysis = Analysis::new(&graph);
        let plan = Torchsched { streams: 3 }.assign(&analysis);
        for v in [0, 1, 2, 3, 4] {
            assert_eq!(plan.stream_of[graph.index_of(v).expect("a node")], 0, "task {v} of the longest path");
        }
        let side: Vec<usize> = [5, 6, 7].iter().map(|&v| plan.stream_of[graph.index_of(v).expect("a node")]).collect();
        assert_eq!(side, vec![1, 2, 1], "the rest alternate over the two side streams");
        let single = Torchsched { streams: 1 }.assign(&analysis);
        assert_eq!(single.streams, 1);
    }
}
