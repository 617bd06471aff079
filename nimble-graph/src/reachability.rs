//! The reachability relation of a task graph, built in one pass with its minimum equivalent
//! graph.
//!
//! Most nodes of a DNN's graph have one successor (87% of a DNN-like or NASNet-like graph's):
//! such a node reaches its successor and what the successor reaches, so it shares the
//! successor's row instead of copying it. Rows are kept only for the other nodes, and for one
//! node in every [`MAX_RUN`] along a long line of one-successor nodes, so that a lookup walks at
//! most that many links.

use crate::adjacency::Adjacency;
use crate::bitset::{CompactRows, RowRef};
use crate::graph::TaskGraph;

/// The most one-successor nodes in a row that share a row further down; a lookup from any node
/// follows at most this many links before it reads a row.
pub const MAX_RUN: u8 = 64;

/// Where the descendants of a node are kept.
#[derive(Clone, Copy, Debug)]
enum Link {
    /// In row `r` of the stored rows.
    Row(u32),
    /// They are the node at this topological position and its descendants (the node has exactly
    /// that one successor).
    Next(u32),
}

/// Which nodes each node reaches.
///
/// `reaches(u, v)` is true when a path of one or more edges leads from `u` to `v` (never for
/// `u == v`: the graph is acyclic). Rows and columns are topological positions, so a node's row
/// holds only positions after its own, and each row keeps only the span of words its bits can
/// lie in. A node with one successor has no row of its own (see the module's documentation).
#[derive(Clone, Debug)]
pub struct Reachability {
    position: Vec<usize>,
    in_index_order: bool,
    /// Per topological position.
    link: Vec<Link>,
    /// Per topological position: words `[start, end)` may hold its descendants.
    span: Vec<(u32, u32)>,
    rows: CompactRows,
}

/// The positions after `q` along its line of one-successor nodes, up to the first that keeps a
/// row (empty when `q` keeps one).
fn line(link: &[Link], q: usize) -> impl Iterator<Item = usize> + '_ {
    std::iter::successors(Some(q), move |&at| match link[at] {
        Link::Next(s) => Some(s as usize),
        Link::Row(_) => None,
    })
    .skip(1)
}

/// The smallest span covering both (`start == end` is empty).
fn join(a: (u32, u32), b: (u32, u32)) -> (u32, u32) {
    match (a.0 == a.1, b.0 == b.1) {
        (true, _) => b,
        (_, true) => a,
        _ => (a.0.min(b.0), a.1.max(b.1)),
    }
}

/// The span of the single word holding bit `q`.
fn word_of(q: usize) -> (u32, u32) {
    ((q / 64) as u32, (q / 64 + 1) as u32)
}

impl Reachability {
    /// The relation and the minimum equivalent graph as successor lists by node index, each in
    /// topological order ([`TaskGraph::reachability_and_reduction`]).
    pub(crate) fn with_reduction(graph: &TaskGraph) -> (Reachability, Adjacency) {
        let n = graph.len();
        let order = graph.topological_order();
        let position = graph.topological_position().to_vec();
        let in_index_order = position.iter().enumerate().all(|(i, &p)| i == p);

        // First pass, in reverse topological order: which nodes share a row, and every span, so
        // the rows are allocated once and exactly.
        let mut link = vec![Link::Row(0); n];
        let mut span = vec![(0u32, 0u32); n];
        let mut run = vec![0u8; n];
        let (mut stored, mut words) = (0u32, 0usize);
        for p in (0..n).rev() {
            let successors = graph.successors(order[p]);
            if let [v] = successors {
                let q = position[*v];
                if run[q] < MAX_RUN {
                    link[p] = Link::Next(q as u32);
                    run[p] = run[q] + 1;
                    span[p] = join(span[q], word_of(q));
                    continue;
                }
            }
            span[p] = successors.iter().fold((0, 0), |s, &v| join(s, join(span[position[v]], word_of(position[v]))));
            link[p] = Link::Row(stored);
            stored += 1;
            words += (span[p].1 - span[p].0) as usize;
        }

        // Second pass: fill the rows. A node's successors are visited in topological order; one
        // already in the row is reached through an earlier kept successor, so its edge is
        // redundant and its descendants are in the row already.
        let mut reach = Reachability { position, in_index_order, link, span, rows: CompactRows::with_capacity(stored as usize, words) };
        // Kept successors, one block per node in the order nodes are visited.
        let mut kept: Vec<usize> = Vec::with_capacity(graph.edge_count());
        let mut block = vec![(0usize, 0usize); n];
        let mut successors: Vec<usize> = Vec::new();
        for p in (0..n).rev() {
            let u = order[p];
            let first = kept.len();
            match reach.link[p] {
                Link::Next(q) => kept.push(order[q as usize]),
                Link::Row(_) => {
                    let (start, end) = (reach.span[p].0 as usize, reach.span[p].1 as usize);
                    successors.clear();
                    successors.extend(graph.successors(u).iter().map(|&v| reach.position[v]));
                    successors.sort_unstable();
                    // The earliest successor is always kept: the row starts as a copy of its row.
                    let r = match successors.first() {
                        Some(&q) => reach.rows.push_copy(start, end, reach.kept_row(q)),
                        None => reach.rows.push_zeroed(start, end),
                    };
                    for (i, &q) in successors.iter().enumerate() {
                        if i == 0 || !reach.rows.get(r, q) {
                            kept.push(order[q]);
                            reach.set_line_in_last(q);
                            if i > 0 {
                                reach.rows.union_into_last(reach.kept_row(q));
                            }
                        }
                    }
                }
            }
            block[u] = (first, kept.len());
        }
        let mut reduced = Adjacency::with_capacity(n, kept.len());
        for &(from, to) in &block {
            reduced.push_list(kept[from..to].iter().copied());
        }
        (reach, reduced)
    }

    /// The kept row position `q`'s descendants end in: its own, or that of the last node of its
    /// line of one-successor nodes.
    fn kept_row(&self, mut q: usize) -> usize {
        loop {
            match self.link[q] {
                Link::Next(s) => q = s as usize,
                Link::Row(r) => return r as usize,
            }
        }
    }

    /// Sets, in the last stored row, position `q` and the positions of the line of
    /// one-successor nodes after it (which reach no further than `q`'s kept row).
    fn set_line_in_last(&mut self, q: usize) {
        self.rows.set_last(q);
        for s in line(&self.link, q) {
            self.rows.set_last(s);
        }
    }

    /// Whether a non-empty path leads from `from` to `to`.
    ///
    /// # Complexity
    /// At most [`MAX_RUN`] links, then one bit.
    pub fn reaches(&self, from: usize, to: usize) -> bool {
        let (mut a, b) = (self.position[from], self.position[to]);
        while b > a {
            match self.link[a] {
                Link::Row(r) => return self.rows.get(r as usize, b),
                Link::Next(q) if q as usize == b => return true,
                Link::Next(q) => a = q as usize,
            }
        }
        false
    }

    /// Whether neither node reaches the other (they may run concurrently).
    pub fn independent(&self, a: usize, b: usize) -> bool {
        a != b && !self.reaches(a, b) && !self.reaches(b, a)
    }

    /// The descendants of the nodes at the topological positions `positions`, as rows over
    /// positions, in the order given. Rows the relation keeps are lent; those of nodes that
    /// share a row are written out.
    ///
    /// # Complexity
    /// O(words + MAX_RUN) per written row.
    pub fn rows_at(&self, positions: impl IntoIterator<Item = usize>) -> Rows<'_> {
        let mut own = CompactRows::default();
        let source = positions
            .into_iter()
            .map(|p| match self.link[p] {
                Link::Row(r) => Source::Kept(r),
                Link::Next(_) => {
                    let (start, end) = self.span[p];
                    let r = own.push_copy_of(start as usize, end as usize, self.rows.row_ref(self.kept_row(p)));
                    line(&self.link, p).for_each(|s| own.set_last(s));
                    Source::Written(r as u32)
                }
            })
            .collect();
        Rows { kept: &self.rows, own, source }
    }

    /// Topological position of each node (by index): the rows' and columns' numbering.
    pub fn position(&self) -> &[usize] {
        &self.position
    }

    /// Whether every node's topological position is its index, so rows read in index order (as
    /// for graphs whose edges all go from lower to higher indices, like traced forwards).
    pub fn in_index_order(&self) -> bool {
        self.in_index_order
    }
}

#[derive(Clone, Copy, Debug)]
enum Source {
    Kept(u32),
    Written(u32),
}

/// Complete descendant rows of chosen nodes ([`Reachability::rows_at`]).
#[derive(Clone, Debug)]
pub struct Rows<'a> {
    kept: &'a CompactRows,
    own: CompactRows,
    source: Vec<Source>,
}

impl Rows<'_> {
    /// The `i`-th row asked for, over topological positions.
    pub fn row(&self, i: usize) -> RowRef<'_> {
        match self.source[i] {
            Source::Kept(r) => self.kept.row_ref(r as usize),
            Source::Written(r) => self.own.row_ref(r as usize),
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.source.len()
    }

    /// Whether no row was asked for.
    pub fn is_empty(&self) -> bool {
        self.source.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use crate::bitset::ones;
    use crate::SyntheticSpec;

    /// Long lines of one-successor nodes (longer than `MAX_RUN`) beside branches: every lookup
    /// and every written row agrees with a search of the graph.
    #[test]
    fn shared_rows_answer_like_a_search() {
        for spec in ["chain:300", "fan:3:150", "dnn:400:2", "nasnet:3", "layered:300:1"] {
            let graph = spec.parse::<SyntheticSpec>().unwrap().generate();
            let (reach, _) = graph.reachability_and_reduction();
            let n = graph.len();
            let rows = reach.rows_at(0..n);
            assert_eq!(rows.len(), n);
            for u in 0..n {
                let mut seen = vec![false; n];
                let mut stack = vec![u];
                while let Some(x) = stack.pop() {
                    for &y in graph.successors(x) {
                        if !seen[y] {
                            seen[y] = true;
                            stack.push(y);
                        }
                    }
                }
                let order = graph.topological_order();
                let row = rows.row(reach.position()[u]);
                let from_row: Vec<usize> = ones(row.words).map(|b| order[b + 64 * row.first_word]).collect();
                let mut expected: Vec<usize> = (0..n).filter(|&v| seen[v]).collect();
                let mut got = from_row.clone();
                expected.sort_unstable();
                got.sort_unstable();
                assert_eq!(got, expected, "{spec}: row of node {u}");
                for (v, &reached) in seen.iter().enumerate() {
                    assert_eq!(reach.reaches(u, v), reached, "{spec}: {u} -> {v}");
                }
            }
        }
    }
}
