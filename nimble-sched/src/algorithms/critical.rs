//! `nimble-critical`: Nimble's chains with the heaviest path held on one stream, stream 0.

use nimble_graph::matching::{hopcroft_karp, Matching};

use super::nimble::{follow, merge_chains, stream_of_merged, Chains};
use super::weights::weight;
use crate::{Analysis, StreamAssigner, StreamPlan};

/// The heaviest path along MEG edges, each node weighing its `duration_us` (1 when unknown:
/// with no durations, the path with the most tasks). Ties go to the first-listed predecessor and
/// the lowest-index end node. A path never leaves a node's stream class; without stream classes
/// it starts at a source.
///
/// # Complexity
/// O(V + E') for the E' MEG edges.
pub fn heaviest_meg_path(analysis: &Analysis<'_>) -> Vec<usize> {
    let graph = analysis.graph();
    let n = graph.len();
    let classes = analysis.stream_classes();
    let same_class = |u: usize, v: usize| classes.is_none_or(|class| class[u] == class[v]);
    let predecessors = analysis.meg_predecessors();
    let mut finish = vec![0.0f64; n];
    let mut best = vec![None; n];
    for &v in graph.topological_order() {
        let mut start = 0.0;
        for &u in &predecessors[v] {
            if same_class(u, v) && (best[v].is_none() || finish[u] > start) {
                start = finish[u];
                best[v] = Some(u);
            }
        }
        finish[v] = start + weight(graph, v);
    }
    let Some(end) = (0..n).max_by(|&a, &b| finish[a].total_cmp(&finish[b]).then(b.cmp(&a))) else {
        return Vec::new();
    };
    let mut path = vec![end];
    while let Some(u) = best[*path.last().expect("the path is non-empty")] {
        path.push(u);
    }
    path.reverse();
    path
}

/// Nimble's stream assignment with one change: the heaviest path ([`heaviest_meg_path`]) is
/// one chain, on stream 0 (chains merged into its stream run before or after it, never beside).
///
/// Its MEG edges are matched first; a maximum matching of the remaining bipartite graph (the
/// path's nodes taken out on the sides its edges use) completes the chains, which are merged as
/// `nimble` merges them. Independent tasks still never share a stream (maximum logical
/// concurrency); the syncs are at most `|E'| − |M|` for this matching, which may be smaller
/// than a maximum one by the path's edges that a maximum matching would not have used.
///
/// Why: on a device its kernels fill, what runs beside the critical path slows it. With the
/// path alone on stream 0, that one stream can be given a higher priority
/// (`torch.compile(..., backend="nimble", options={"algorithm": "nimble-critical", "priority":
/// True})`), so that the path's kernels are dispatched first and the other streams fill what
/// they leave.
pub struct NimbleCritical;

impl StreamAssigner for NimbleCritical {
    fn name(&self) -> String {
        "nimble-critical".into()
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let n = analysis.graph().len();
        let path = heaviest_meg_path(analysis);
        let mut on_path_left = vec![false; n];
        let mut on_path_right = vec![false; n];
        for pair in path.windows(2) {
            on_path_left[pair[0]] = true;
            on_path_right[pair[1]] = true;
        }
        let classes = analysis.stream_classes();
        let rest = analysis.meg_successors().filtered(|u, v| !on_path_left[u] && !on_path_right[v] && classes.is_none_or(|class| class[u] == class[v]));
        let mut matching: Matching = hopcroft_karp(n, &rest);
        for pair in path.windows(2) {
            matching.right_of[pair[0]] = Some(pair[1]);
            matching.left_of[pair[1]] = Some(pair[0]);
        }
        let chains = Chains { matching_size: matching.size(), chains: follow(&matching, n) };
        let (_, streams) = merge_chains(analysis, &chains);
        let stream_of = stream_of_merged(&chains, &streams, n);
        // Streams are numbered by first use in issue order: with the path's first task (a
        // source, unless stream classes cut the path there) issued first, its stream is 0.
        let graph = analysis.graph();
        let order = match path.first() {
            Some(&first) if graph.predecessors(first).is_empty() => {
                Some(std::iter::once(first).chain(graph.topological_order().iter().copied().filter(|&v| v != first)).collect())
            }
            _ => None,
        };
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, order)
    }
}
