//! `StreamPlan`: which stream runs each task, in what order, and where streams synchronize.

use serde_json::{json, Value};

use crate::analysis::Analysis;
use crate::stream_clocks::Frontier;

/// The output of a stream assigner, and the input of every executor and of the simulator.
///
/// Executors replay it as data: walk `order`; before node `v`, wait on the event of every sync
/// `(u, v)`; launch `v` on `stream_of[v]`; after `u`, record its event if any sync starts at `u`.
#[derive(Clone, Debug, PartialEq)]
pub struct StreamPlan {
    /// The registry name of the algorithm that produced the plan (with its argument).
    pub algorithm: String,
    /// Number of streams; streams are numbered `0..streams` by first use in `order`.
    pub streams: usize,
    /// Stream of each node, by node index.
    pub stream_of: Vec<usize>,
    /// Issue order: a topological order of the node indices. A stream runs its nodes in this
    /// order restricted to the stream.
    pub order: Vec<usize>,
    /// Event syncs `(u, v)`: an event recorded after `u` on `u`'s stream is waited on before `v`
    /// on `v`'s stream. Sorted by the issue position of `v`, then of `u`, latest first.
    pub syncs: Vec<(usize, usize)>,
}

impl StreamPlan {
    /// Completes an assignment into a plan: renumbers streams by first use in `order` and adds
    /// the fewest syncs this method can find that enforce every dependency.
    ///
    /// Only MEG edges between different streams are candidates (every other dependency follows
    /// from them), and one is skipped when stream order and the syncs already chosen imply it.
    /// Candidates of a node are taken latest-issued first, because a later source tends to
    /// carry the earlier ones in its own past. So a plan never has more syncs than cross-stream
    /// MEG edges, and never a sync that is implied by the others at the time it is added.
    ///
    /// # Arguments
    /// * `stream_of` – any stream label per node index (labels need not be dense).
    /// * `order` – a topological order of all nodes (the graph's own if `None`).
    ///
    /// # Complexity
    /// O((V + S)·V/64) time and V²/8 bytes for S syncs with bit rows, or O(V + C·K) with vector
    /// clocks for C cross-stream MEG edges and K streams, whichever is less (`stream_clocks`).
    ///
    /// # Panics
    /// When `stream_of` or `order` does not cover the graph's nodes, or `order` is not
    /// topological: assigners build these from the graph, so this is a bug in the assigner.
    pub fn from_assignment(
        analysis: &Analysis<'_>,
        algorithm: impl Into<String>,
        stream_of: &[usize],
        order: Option<Vec<usize>>,
    ) -> StreamPlan {
        let graph = analysis.graph();
        let n = graph.len();
        let order = order.unwrap_or_else(|| graph.topological_order().to_vec());
        assert_eq!(stream_of.len(), n, "an assignment labels every node");
        assert_eq!(order.len(), n, "an issue order lists every node");
        let mut position = vec![usize::MAX; n];
        for (p, &v) in order.iter().enumerate() {
            position[v] = p;
        }
        let (streams, stream_of) = renumber_by_first_use(stream_of, &order);

        let cross_stream = (0..n).map(|v| analysis.meg_predecessors()[v].iter().filter(|&&u| stream_of[u] != stream_of[v]).count()).sum();
        let mut happens_before = Frontier::new(n, streams, cross_stream);
        let mut syncs = Vec::new();
        let mut candidates = Vec::new();
        for &v in &order {
            happens_before.issue(v, stream_of[v]);
            candidates.clear();
            for &u in &analysis.meg_predecessors()[v] {
                assert!(position[u] < position[v], "issue order must be topological");
                if stream_of[u] != stream_of[v] {
                    candidates.push(u);
                }
            }
            candidates.sort_unstable_by_key(|&u| std::cmp::Reverse(position[u]));
            for &u in &candidates {
                if !happens_before.ordered(u, v) {
                    happens_before.sync(u, v);
                    syncs.push((u, v));
                }
            }
        }
        StreamPlan { algorithm: algorithm.into(), streams, stream_of, order, syncs }
    }

    /// The plan as JSON, with nodes named by their user ids: `algorithm`, `streams`, `syncs`,
    /// `stream_of` (by node id), `order` (ids) and `sync_edges` (`[[u, v], …]`, ids).
    pub fn to_json(&self, analysis: &Analysis<'_>) -> Value {
        let graph = analysis.graph();
        let id = |v: usize| graph.id_of(v);
        let stream_of: serde_json::Map<String, Value> =
            (0..graph.len()).map(|v| (id(v).to_string(), json!(self.stream_of[v]))).collect();
        json!({
            "algorithm": self.algorithm,
            "streams": self.streams,
            "syncs": self.syncs.len(),
            "stream_of": stream_of,
            "order": self.order.iter().map(|&v| id(v)).collect::<Vec<_>>(),
            "sync_edges": self.syncs.iter().map(|&(u, v)| [id(u), id(v)]).collect::<Vec<_>>(),
        })
    }

    /// Nodes of each stream in issue order.
    pub fn stream_sequences(&self) -> Vec<Vec<usize>> {
        let mut sequences = vec![Vec::new(); self.streams];
        for &v in &self.order {
            sequences[self.stream_of[v]].push(v);
        }
        sequences
    }
}

/// Maps arbitrary stream labels to `0..k` in order of first use along `order`.
fn renumber_by_first_use(labels: &[usize], order: &[usize]) -> (usize, Vec<usize>) {
    let mut mapping = std::collections::HashMap::new();
    let mut stream_of = vec![0; labels.len()];
    for &v in order {
        let next = mapping.len();
        stream_of[v] = *mapping.entry(labels[v]).or_insert(next);
    }
    (mapping.len(), stream_of)
}
