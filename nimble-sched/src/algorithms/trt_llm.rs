//! `trt-llm`: TensorRT-LLM's automatic multi-stream list scheduler.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::weights::{upward_rank, weight};
use crate::{Analysis, StreamAssigner, StreamPlan};

/// List scheduling on at most `K` streams: the ready task farthest from the graph's exit goes
/// first (ties by topological position), onto the first stream that is idle by the time its
/// inputs are done, else the stream that frees up first. A task of zero weight goes to its first
/// producer's stream (stream 0 for a source). Launch order: the order tasks are scheduled in.
///
/// From TensorRT-LLM's auto multi-stream pass for `torch.compile`
/// (`tensorrt_llm/_torch/compilation/multi_stream/auto_multi_stream.py`, `max_num_streams`):
/// a task's distance to the exit is the heaviest path after it, weighing each task by its cost.
/// TensorRT-LLM weighs GEMMs 10, MoE 20 and the rest 1; here a task weighs its `duration_us`
/// (1 when the graph has none). `K` defaults to 3.
///
/// # Complexity
/// O((V + E) log V + V·K) beyond the analysis, plus the sync computation.
pub struct TrtLlm {
    /// The most streams to use (at least 1).
    pub streams: usize,
}

/// A ready task, ordered by distance to the exit, then by topological position (earlier first).
#[derive(PartialEq)]
struct Ready {
    distance: f64,
    position: usize,
    task: usize,
}

impl Eq for Ready {}

impl Ord for Ready {
    fn cmp(&self, other: &Self) -> Ordering {
        self.distance.total_cmp(&other.distance).then(other.position.cmp(&self.position))
    }
}

impl PartialOrd for Ready {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl StreamAssigner for TrtLlm {
    fn name(&self) -> String {
        format!("trt-llm:{}", self.streams)
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let n = graph.len();
        let rank = upward_rank(graph);
        let position = graph.topological_position();
        // Distance to the exit: what comes after the task, not the task itself.
        let ready_entry = |v: usize| Ready { distance: rank[v] - weight(graph, v), position: position[v], task: v };
        let mut waiting: Vec<usize> = (0..n).map(|v| graph.predecessors(v).len()).collect();
        let mut ready: BinaryHeap<Ready> = (0..n).filter(|&v| waiting[v] == 0).map(ready_entry).collect();
        let mut free_at = vec![0.0f64; self.streams.max(1)];
        let mut finish = vec![0.0f64; n];
        let mut stream_of = vec![0; n];
        let mut order = Vec::with_capacity(n);
        while let Some(Ready { task: v, .. }) = ready.pop() {
            let start = graph.predecessors(v).iter().map(|&u| finish[u]).fold(0.0, f64::max);
            let cost = weight(graph, v);
            let stream = if cost == 0.0 {
                graph.predecessors(v).first().map_or(0, |&u| stream_of[u])
            } else {
                free_at.iter().position(|&t| t <= start).unwrap_or_else(|| {
                    (0..free_at.len()).min_by(|&a, &b| free_at[a].total_cmp(&free_at[b]).then(a.cmp(&b))).unwrap_or(0)
                })
            };
            stream_of[v] = stream;
            finish[v] = start.max(free_at[stream]) + cost;
            free_at[stream] = finish[v];
            order.push(v);
            for &w in graph.successors(v) {
                waiting[w] -= 1;
                if waiting[w] == 0 {
                    ready.push(ready_entry(w));
                }
            }
        }
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, Some(order))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimble_graph::{Node, TaskGraphBuilder};

    /// A source (weight 1) feeding four branches of two tasks each, a head of weight 1 and a
    /// tail of 1, 5, 3 or 2, into a sink, on 3 streams: the heads launch farthest from the exit
    /// first (the 5-tail's, 3's, 2's, 1's), the first three each on an idle stream, the fourth on
    /// the stream that frees up first (the lowest of three that free up together: stream 0).
    #[test]
    fn the_farthest_from_the_exit_goes_first_onto_an_idle_stream() {
        let mut builder = TaskGraphBuilder::new();
        builder.add_node(Node::new(0, "source").with_duration(1.0)).expect("a new id");
        builder.add_node(Node::new(5, "sink").with_duration(1.0)).expect("a new id");
        for (head, cost) in [(1, 1.0), (2, 5.0), (3, 3.0), (4, 2.0)] {
            builder.add_node(Node::new(head, "head").with_duration(1.0)).expect("a new id");
            builder.add_node(Node::new(head + 10, "tail").with_duration(cost)).expect("a new id");
            for (u, v) in [(0, head), (head, head + 10), (head + 10, 5)] {
                builder.add_edge(u, v).expect("known ids");
            }
        }
        let graph = builder.build().expect("a DAG");
        let analysis = Analysis::new(&graph);
        let plan = TrtLlm { streams: 3 }.assign(&analysis);
        let ids: Vec<u64> = plan.order.iter().map(|&v| graph.id_of(v)).collect();
        assert_eq!(ids[..5], [0, 2, 3, 4, 1], "launch order {ids:?}");
        let stream = |id| plan.stream_of[graph.index_of(id).expect("a node")];
        assert_eq!(plan.streams, 3);
        assert!(stream(2) != stream(3) && stream(3) != stream(4) && stream(2) != stream(4));
        assert_eq!(stream(1), stream(0), "the last head waits for stream 0 to free up");
    }
}
