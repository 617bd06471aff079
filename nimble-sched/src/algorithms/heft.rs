//! `heft`: Heterogeneous Earliest Finish Time list scheduling onto K streams.

use super::weights::{upward_rank, weight};
use crate::{Analysis, StreamAssigner, StreamPlan};

/// Tasks in decreasing upward rank (their weight plus the heaviest path after them; ties by
/// topological position), each placed on the stream where it finishes earliest, into the
/// earliest idle gap of that stream long enough to hold it after its inputs are done
/// (insertion), ties to the lower stream. A stream runs its tasks in the order of their planned
/// starts, and the launch order is that of the planned starts.
///
/// From Topcuoglu, Hariri and Wu, "Performance-Effective and Low-Complexity Task Scheduling for
/// Heterogeneous Computing" (IEEE TPDS 2002). Streams of one GPU are identical processors that
/// share memory, so every task costs its `duration_us` (1 when the graph has none) on every
/// stream and no edge costs a transfer. `K` defaults to 4.
///
/// # Complexity
/// O(V log V + E) for the ranks and O(V·K·g) for the placement, g the gaps scanned per stream
/// (a stream's intervals after the task's ready time; a binary search finds the first).
pub struct Heft {
    /// The most streams to use (at least 1).
    pub streams: usize,
}

impl StreamAssigner for Heft {
    fn name(&self) -> String {
        format!("heft:{}", self.streams)
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let n = graph.len();
        let rank = upward_rank(graph);
        let position = graph.topological_position();
        let mut by_rank: Vec<usize> = (0..n).collect();
        by_rank.sort_by(|&a, &b| rank[b].total_cmp(&rank[a]).then(position[a].cmp(&position[b])));
        // Busy intervals (start, finish, task) of each stream, sorted by start.
        let mut busy: Vec<Vec<(f64, f64, usize)>> = vec![Vec::new(); self.streams.max(1)];
        let (mut start, mut finish, mut stream_of) = (vec![0.0f64; n], vec![0.0f64; n], vec![0; n]);
        for &v in &by_rank {
            let ready = graph.predecessors(v).iter().map(|&u| finish[u]).fold(0.0, f64::max);
            let cost = weight(graph, v);
            let (stream, at, slot) = (0..busy.len())
                .map(|s| {
                    let (at, slot) = earliest_gap(&busy[s], ready, cost);
                    (s, at, slot)
                })
                .min_by(|a, b| (a.1 + cost).total_cmp(&(b.1 + cost)).then(a.0.cmp(&b.0)))
                .expect("at least one stream");
            busy[stream].insert(slot, (at, at + cost, v));
            (start[v], finish[v], stream_of[v]) = (at, at + cost, stream);
        }
        // Launch by planned start; a task and its zero-cost successor start together, so ties
        // go by rank order, in which every task comes after its predecessors.
        let mut rank_index = vec![0; n];
        for (i, &v) in by_rank.iter().enumerate() {
            rank_index[v] = i;
        }
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| start[a].total_cmp(&start[b]).then(rank_index[a].cmp(&rank_index[b])));
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, Some(order))
    }
}

/// The earliest start at or after `ready` where a task of `cost` fits between a stream's busy
/// intervals, and the index to insert it at.
fn earliest_gap(busy: &[(f64, f64, usize)], ready: f64, cost: f64) -> (f64, usize) {
    // Intervals that finish by `ready` cannot bound a gap after it.
    let first = busy.partition_point(|&(_, end, _)| end <= ready);
    let mut at = ready;
    for (i, &(begin, end, _)) in busy.iter().enumerate().skip(first) {
        if at + cost <= begin && (cost > 0.0 || at < begin) {
            return (at, i);
        }
        at = at.max(end);
    }
    (at, busy.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimble_graph::{Node, TaskGraphBuilder};

    /// A (10) feeds E (10) → F (10) and, with C (1), D (1) → G (1); R (1.5) stands alone.
    /// Ranked A, E, F, C, D, R, G: A, E, F fill stream 0 until 30; C takes stream 1 at 0–1;
    /// D waits for A on stream 1 (10–11), leaving it idle 1–10; R, ranked after D, goes into
    /// that gap (1–2.5) and is launched before D.
    #[test]
    fn a_task_goes_into_an_idle_gap_before_later_work() {
        let mut builder = TaskGraphBuilder::new();
        for (id, name, cost) in [(0, "A", 10.0), (1, "E", 10.0), (2, "F", 10.0), (3, "C", 1.0), (4, "D", 1.0), (5, "G", 1.0), (6, "R", 1.5)] {
            builder.add_node(Node::new(id, name).with_duration(cost)).expect("a new id");
        }
        for (u, v) in [(0, 1), (1, 2), (0, 4), (3, 4), (4, 5)] {
            builder.add_edge(u, v).expect("known ids");
        }
        let graph = builder.build().expect("a DAG");
        let analysis = Analysis::new(&graph);
        let plan = Heft { streams: 2 }.assign(&analysis);
        let at = |id| plan.order.iter().position(|&v| graph.id_of(v) == id).expect("issued");
        let stream = |id| plan.stream_of[graph.index_of(id).expect("a node")];
        assert!(stream(0) == stream(1) && stream(1) == stream(2), "A, E, F on one stream");
        assert!(stream(3) == stream(4) && stream(6) == stream(4) && stream(4) != stream(0));
        assert!(at(6) < at(4), "R is launched before D, into the gap D's wait leaves");
    }
}
