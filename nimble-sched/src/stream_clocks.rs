//! Happens-before of a plan under construction as vector clocks: per node, how many nodes of
//! each stream are known to finish before it starts.
//!
//! What is known to finish before a node is a prefix of every stream (a stream runs its nodes in
//! order, so knowing a node means knowing the ones before it), so one count per stream holds the
//! same relation as [`HappensBefore`]'s bit rows. A node shares its stream's clock until a sync
//! arrives at it; then it gets a copy of its own. That costs O(S) per sync for S streams,
//! against O(V/64) per node for bit rows, and wins when streams are few (DNN-like graphs plan
//! onto a handful of streams). [`Frontier`] picks the cheaper one; both answer alike, so the
//! plans are the same.

use crate::happens_before::HappensBefore;

/// Vector clocks, one version per sync target (and one all-zero start every stream shares).
pub(crate) struct StreamClocks {
    streams: usize,
    stream_of: Vec<u32>,
    /// Position of each node on its stream.
    index: Vec<u32>,
    /// The clock version each node saw when it was issued (or got at its first sync).
    version_of: Vec<u32>,
    /// Clock versions, `streams` counts each.
    counts: Vec<u32>,
    /// Per stream: its current version, nodes issued, and the node that owns the current
    /// version (a sync target, which may still add to it).
    current: Vec<u32>,
    issued: Vec<u32>,
    owner: Vec<Option<usize>>,
}

impl StreamClocks {
    pub(crate) fn new(nodes: usize, streams: usize) -> Self {
        StreamClocks {
            streams,
            stream_of: vec![0; nodes],
            index: vec![0; nodes],
            version_of: vec![0; nodes],
            counts: vec![0; streams],
            current: vec![0; streams],
            issued: vec![0; streams],
            owner: vec![None; streams],
        }
    }

    pub(crate) fn issue(&mut self, v: usize, stream: usize) {
        self.stream_of[v] = stream as u32;
        self.index[v] = self.issued[stream];
        self.issued[stream] += 1;
        self.version_of[v] = self.current[stream];
        self.owner[stream] = None;
    }

    pub(crate) fn ordered(&self, u: usize, v: usize) -> bool {
        let (su, sv) = (self.stream_of[u] as usize, self.stream_of[v] as usize);
        if su == sv {
            return self.index[u] < self.index[v];
        }
        self.counts[self.version_of[v] as usize * self.streams + su] > self.index[u]
    }

    /// A sync `u -> v` into `v`, the node issued last on its stream.
    pub(crate) fn sync(&mut self, u: usize, v: usize) {
        let sv = self.stream_of[v] as usize;
        if self.owner[sv] != Some(v) {
            let from = self.current[sv] as usize * self.streams;
            let version = (self.counts.len() / self.streams) as u32;
            self.counts.extend_from_within(from..from + self.streams);
            self.current[sv] = version;
            self.version_of[v] = version;
            self.owner[sv] = Some(v);
        }
        let (target, source) = (self.version_of[v] as usize * self.streams, self.version_of[u] as usize * self.streams);
        for t in 0..self.streams {
            let known = self.counts[source + t];
            if known > self.counts[target + t] {
                self.counts[target + t] = known;
            }
        }
        let su = self.stream_of[u] as usize;
        self.counts[target + su] = self.counts[target + su].max(self.index[u] + 1);
    }
}

/// Happens-before while a plan is built: bit rows or vector clocks, whichever is cheaper.
pub(crate) enum Frontier {
    Rows(HappensBefore),
    Clocks(StreamClocks),
}

impl Frontier {
    /// For `nodes` nodes on `streams` streams with at most `candidates` syncs: clocks cost about
    /// `candidates · streams` counts, rows `nodes · nodes / 64` words.
    pub(crate) fn new(nodes: usize, streams: usize, candidates: usize) -> Self {
        if candidates.saturating_mul(streams) <= nodes.saturating_mul(nodes.div_ceil(64)) {
            Frontier::Clocks(StreamClocks::new(nodes, streams))
        } else {
            Frontier::Rows(HappensBefore::new(nodes, streams))
        }
    }

    pub(crate) fn issue(&mut self, v: usize, stream: usize) {
        match self {
            Frontier::Rows(rows) => rows.issue(v, stream),
            Frontier::Clocks(clocks) => clocks.issue(v, stream),
        }
    }

    pub(crate) fn ordered(&self, u: usize, v: usize) -> bool {
        match self {
            Frontier::Rows(rows) => rows.ordered(u, v),
            Frontier::Clocks(clocks) => clocks.ordered(u, v),
        }
    }

    pub(crate) fn sync(&mut self, u: usize, v: usize) {
        match self {
            Frontier::Rows(rows) => rows.sync(u, v),
            Frontier::Clocks(clocks) => clocks.sync(u, v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Clocks and rows answer every query alike along a random plan-like run.
    #[test]
    fn clocks_answer_as_bit_rows() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = |m: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m as u64) as usize
        };
        for _ in 0..50 {
            let (nodes, streams) = (60, 1 + random(6));
            let mut rows = HappensBefore::new(nodes, streams);
            let mut clocks = StreamClocks::new(nodes, streams);
            for v in 0..nodes {
                let stream = random(streams);
                rows.issue(v, stream);
                clocks.issue(v, stream);
                for _ in 0..random(3) {
                    if v > 0 {
                        let u = random(v);
                        rows.sync(u, v);
                        clocks.sync(u, v);
                    }
                }
                for u in 0..v {
                    assert_eq!(clocks.ordered(u, v), rows.ordered(u, v), "node {u} before {v}");
                }
            }
        }
    }
}
