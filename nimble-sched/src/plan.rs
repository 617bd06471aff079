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
    /// When every stream's nodes are ordered by reachability (each reaches the next, as with
    /// `nimble` and any assigner that never puts independent tasks on one stream), no
    /// cross-stream MEG edge is implied by the others: a second path from `u` to `v` through the
    /// plan would be a second path through the graph, and an MEG edge has none. Then every
    /// cross-stream MEG edge is a sync, and the plan is built without tracking happens-before.
    ///
    /// # Complexity
    /// O(V + E') when streams follow reachability. Otherwise O((V + S)·V/64) time and V²/8 bytes
    /// for S syncs with bit rows, or O(V + C·K) with vector clocks for C cross-stream MEG edges
    /// and K streams, whichever is less (`stream_clocks`).
    ///
    /// # Malformed assignments
    /// When `stream_of` or `order` does not cover the graph's nodes, or `order` is not a
    /// topological order (a bug in the assigner, a user's new one say), no syncs are chosen and
    /// the plan keeps what it was given: [`crate::verified`], which every caller runs, then
    /// returns [`crate::SchedError::InvalidPlan`] naming the algorithm and the problem, instead of
    /// this function panicking.
    pub fn from_assignment(
        analysis: &Analysis<'_>,
        algorithm: impl Into<String>,
        stream_of: &[usize],
        order: Option<Vec<usize>>,
    ) -> StreamPlan {
        let graph = analysis.graph();
        let n = graph.len();
        let order = order.unwrap_or_else(|| graph.topological_order().to_vec());
        let mut position = vec![usize::MAX; n];
        let mut covers = stream_of.len() == n && order.len() == n;
        for (p, &v) in order.iter().enumerate() {
            match position.get_mut(v) {
                Some(slot) if *slot == usize::MAX => *slot = p,
                _ => covers = false,
            }
        }
        if !covers || graph.edges().any(|(u, v)| position[u] > position[v]) {
            let streams = stream_of.iter().max().map_or(0, |s| s + 1);
            return StreamPlan { algorithm: algorithm.into(), streams, stream_of: stream_of.to_vec(), order, syncs: Vec::new() };
        }
        let (streams, stream_of) = renumber_by_first_use(stream_of, &order);

        let syncs = plan_syncs(analysis, &stream_of, streams, &order, &position, true);
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

/// The syncs of a plan: each node's cross-stream MEG edges, latest-issued source first, unless
/// stream order and the syncs chosen before already imply them. With `may_shortcut`,
/// happens-before is not tracked when streams follow reachability (the tests turn it off to
/// compare).
pub(crate) fn plan_syncs(
    analysis: &Analysis<'_>,
    stream_of: &[usize],
    streams: usize,
    order: &[usize],
    position: &[usize],
    may_shortcut: bool,
) -> Vec<(usize, usize)> {
    let n = order.len();
    let mut happens_before = (!may_shortcut || !streams_follow_reachability(analysis, stream_of, streams, order)).then(|| {
        let cross_stream = (0..n).map(|v| analysis.meg_predecessors()[v].iter().filter(|&&u| stream_of[u] != stream_of[v]).count()).sum();
        Frontier::new(n, streams, cross_stream)
    });
    let mut syncs = Vec::new();
    let mut candidates = Vec::new();
    for &v in order {
        if let Some(happens_before) = happens_before.as_mut() {
            happens_before.issue(v, stream_of[v]);
        }
        candidates.clear();
        for &u in &analysis.meg_predecessors()[v] {
            if stream_of[u] != stream_of[v] {
                candidates.push(u);
            }
        }
        candidates.sort_unstable_by_key(|&u| std::cmp::Reverse(position[u]));
        for &u in &candidates {
            match happens_before.as_mut() {
                // Streams follow reachability: nothing but this edge orders `u` before `v`.
                None => syncs.push((u, v)),
                Some(happens_before) if !happens_before.ordered(u, v) => {
                    happens_before.sync(u, v);
                    syncs.push((u, v));
                }
                Some(_) => {}
            }
        }
    }
    syncs
}

/// Whether each node reaches the next one issued on its stream: then stream order adds no
/// dependency the graph lacks.
pub(crate) fn streams_follow_reachability(analysis: &Analysis<'_>, stream_of: &[usize], streams: usize, order: &[usize]) -> bool {
    let reach = analysis.reachability();
    let mut last = vec![usize::MAX; streams];
    order.iter().all(|&v| {
        let previous = std::mem::replace(&mut last[stream_of[v]], v);
        previous == usize::MAX || reach.reaches(previous, v)
    })
}

/// Maps arbitrary stream labels to `0..k` in order of first use along `order`.
fn renumber_by_first_use(labels: &[usize], order: &[usize]) -> (usize, Vec<usize>) {
    let mut stream_of = vec![0; labels.len()];
    let mut streams = 0;
    // Labels are usually below the node count (assigners number streams from 0): a table then.
    if labels.iter().all(|&label| label < labels.len()) {
        let mut mapping = vec![usize::MAX; labels.len()];
        for &v in order {
            if mapping[labels[v]] == usize::MAX {
                mapping[labels[v]] = streams;
                streams += 1;
            }
            stream_of[v] = mapping[labels[v]];
        }
    } else {
        let mut mapping = std::collections::HashMap::new();
        for &v in order {
            let next = mapping.len();
            stream_of[v] = *mapping.entry(labels[v]).or_insert(next);
        }
        streams = mapping.len();
    }
    (streams, stream_of)
}
