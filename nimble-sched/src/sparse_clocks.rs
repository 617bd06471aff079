//! Happens-before of a finished plan as sparse vector clocks: what the checker proves plans with.
//!
//! A node's clock holds, per stream, how many of that stream's nodes are known to finish before
//! the node does (itself included), and only for the streams it has heard of. Every stream keeps
//! one clock that grows as its nodes are issued; a node that records an event keeps a snapshot,
//! which the nodes that wait on it merge in. So a wide fan (one source, 100,000 branches on as
//! many streams, one sink) costs a few entries per branch and one big merge at the sink, where
//! dense clocks cost O(streams) per sync and bit rows V²/8 bytes.
//!
//! Where streams are many and every node hears of most of them (a greedy plan of a layered
//! random graph: tens of thousands of streams), the snapshots grow as V·S; so the clocks take a
//! budget of entries, and [`SparseClocks::issue`] gives up once it is spent: the checker then
//! proves the plan with bit rows ([`crate::happens_before::RowClocks`], V²/8 bytes) instead.
//!
//! # Complexity
//! O(V + E + Σ |clock of each merged predecessor|), memory O(V + Σ |snapshot|), at most the
//! budget.

use std::collections::HashMap;

type Clock = HashMap<u32, u32>;

/// What one node's predecessors in the plan (its stream predecessor and the sources of its
/// syncs) say about the others: the best and second-best count per stream, and who gave the
/// best, so each sync can be tested against all predecessors but itself.
struct Merge {
    best: HashMap<u32, (u32, usize, u32)>,
}

impl Merge {
    fn new() -> Self {
        Merge { best: HashMap::new() }
    }

    fn add(&mut self, who: usize, clock: &Clock) {
        for (&stream, &count) in clock {
            let entry = self.best.entry(stream).or_insert((0, usize::MAX, 0));
            if count > entry.0 {
                *entry = (count, who, entry.0);
            } else if count > entry.2 {
                entry.2 = count;
            }
        }
    }

    /// The most nodes of `stream` some predecessor other than `who` has finished.
    fn without(&self, who: usize, stream: u32) -> u32 {
        match self.best.get(&stream) {
            Some(&(best, giver, second)) => {
                if giver == who {
                    second
                } else {
                    best
                }
            }
            None => 0,
        }
    }
}

/// The plan's happens-before relation, built node by node in issue order.
pub(crate) struct SparseClocks {
    stream_of: Vec<u32>,
    /// Position of each node on its stream.
    index: Vec<u32>,
    issued: Vec<u32>,
    current: Vec<Clock>,
    /// Clocks of the nodes that record an event, taken when they were issued.
    snapshots: HashMap<usize, Clock>,
    records: Vec<bool>,
    issued_node: Vec<bool>,
    /// Clock entries still allowed (stream clocks and snapshots together).
    budget: usize,
}

impl SparseClocks {
    /// `records[u]`: whether some node waits on `u`'s event (its clock is kept); `budget`: the
    /// most clock entries to hold.
    pub(crate) fn new(streams: usize, records: Vec<bool>, budget: usize) -> Self {
        let nodes = records.len();
        SparseClocks {
            stream_of: vec![0; nodes],
            index: vec![0; nodes],
            issued: vec![0; streams],
            current: vec![Clock::new(); streams],
            snapshots: HashMap::new(),
            records,
            issued_node: vec![false; nodes],
            budget,
        }
    }

    /// Issues `v` on `stream` after waiting on the events of `sources` (issued earlier), and
    /// returns which of those syncs the other predecessors already imply; `None` once the
    /// budget of entries is spent (the clocks are then no longer usable).
    pub(crate) fn issue(&mut self, v: usize, stream: usize, sources: &[usize]) -> Option<Vec<bool>> {
        let s = stream as u32;
        self.issued_node[v] = true;
        self.stream_of[v] = s;
        self.index[v] = self.issued[stream];
        self.issued[stream] += 1;
        let mut redundant = Vec::with_capacity(sources.len());
        if !sources.is_empty() {
            let mut merge = Merge::new();
            // The stream predecessor's clock is the stream's; it is no sync (who = MAX - 1).
            merge.add(usize::MAX - 1, &self.current[stream]);
            let empty = Clock::new();
            for (i, &u) in sources.iter().enumerate() {
                merge.add(i, self.snapshots.get(&u).unwrap_or(&empty));
            }
            for (i, &u) in sources.iter().enumerate() {
                let (su, needed) = (self.stream_of[u], self.index[u] + 1);
                redundant.push(su == s || merge.without(i, su) >= needed);
            }
            let clock = &mut self.current[stream];
            let before = clock.len();
            for (&stream_of_best, &(count, _, _)) in &merge.best {
                let entry = clock.entry(stream_of_best).or_insert(0);
                *entry = (*entry).max(count);
            }
            self.budget = self.budget.checked_sub(clock.len() - before)?;
        }
        // Successors on this stream and waiters on v's event know v has finished.
        if self.current[stream].insert(s, self.index[v] + 1).is_none() {
            self.budget = self.budget.checked_sub(1)?;
        }
        if self.records[v] {
            self.budget = self.budget.checked_sub(self.current[stream].len())?;
            self.snapshots.insert(v, self.current[stream].clone());
        }
        Some(redundant)
    }

    /// Whether `u` finishes before `v` starts, for `v` the node just issued on its stream (no
    /// later node of that stream issued yet).
    pub(crate) fn before_latest(&self, u: usize, v: usize) -> bool {
        if !self.issued_node[u] {
            return false;
        }
        let (su, sv) = (self.stream_of[u], self.stream_of[v]);
        if su == sv {
            return self.index[u] < self.index[v];
        }
        self.current[sv as usize].get(&su).is_some_and(|&count| count > self.index[u])
    }
}
