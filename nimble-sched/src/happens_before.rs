//! The happens-before relation of a plan: stream order plus event syncs.
//!
//! Shared by plan construction (which adds only the syncs the relation does not yet imply) and
//! the checker (which proves every dependency is in it), so both reason about plans the same way.

use nimble_graph::bitset::BitMatrix;

/// Happens-before sets built node by node in issue order.
///
/// Row `v` holds every node that is guaranteed to finish before `v` starts: the earlier nodes of
/// `v`'s stream, the sources of `v`'s syncs, and transitively what happens before those.
pub(crate) struct HappensBefore {
    before: BitMatrix,
    last_on_stream: Vec<Option<usize>>,
}

impl HappensBefore {
    pub(crate) fn new(nodes: usize, streams: usize) -> Self {
        HappensBefore { before: BitMatrix::new(nodes, nodes), last_on_stream: vec![None; streams] }
    }

    /// Starts node `v` on `stream`: it inherits what happens before its stream predecessor.
    pub(crate) fn issue(&mut self, v: usize, stream: usize) {
        if let Some(previous) = self.last_on_stream[stream].replace(v) {
            self.before.union_rows(v, previous);
            self.before.set(v, previous);
        }
    }

    /// Records a sync `u -> v`: everything before `u`, and `u`, now happens before `v`.
    pub(crate) fn sync(&mut self, u: usize, v: usize) {
        self.before.union_rows(v, u);
        self.before.set(v, u);
    }

    /// Whether `u` is known to finish before `v` starts.
    pub(crate) fn ordered(&self, u: usize, v: usize) -> bool {
        self.before.get(v, u)
    }
}

/// The checker's happens-before as bit rows, for plans whose sparse clocks outgrow their budget
/// (`sparse_clocks`): the same answers, in V²/8 bytes.
pub(crate) struct RowClocks {
    rows: HappensBefore,
    stream_of: Vec<usize>,
}

impl RowClocks {
    pub(crate) fn new(nodes: usize, streams: usize) -> Self {
        RowClocks { rows: HappensBefore::new(nodes, streams), stream_of: vec![usize::MAX; nodes] }
    }

    /// Issues `v` on `stream` after waiting on the events of `sources` (issued earlier), and
    /// returns which of those syncs the stream predecessor and the other syncs already imply.
    pub(crate) fn issue(&mut self, v: usize, stream: usize, sources: &[usize]) -> Vec<bool> {
        self.stream_of[v] = stream;
        self.rows.issue(v, stream);
        let redundant = sources
            .iter()
            .enumerate()
            .map(|(i, &u)| {
                self.stream_of[u] == stream
                    || self.rows.ordered(u, v)
                    || sources.iter().enumerate().any(|(j, &w)| j != i && (w == u || self.rows.ordered(u, w)))
            })
            .collect();
        for &u in sources {
            self.rows.sync(u, v);
        }
        redundant
    }

    /// Whether `u` finishes before `v` starts.
    pub(crate) fn before_latest(&self, u: usize, v: usize) -> bool {
        self.rows.ordered(u, v)
    }
}
