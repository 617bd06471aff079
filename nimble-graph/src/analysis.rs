//! Analyses of a [`TaskGraph`]: reachability, the minimum equivalent graph (transitive
//! reduction), the critical path and the width.

use crate::adjacency::Adjacency;
use crate::graph::TaskGraph;
use crate::matching::{augment_dense, hopcroft_karp, Matching};
use crate::reachability::Reachability;

/// The critical path: the heaviest path by `duration_us` (missing durations count as 0).
#[derive(Clone, Debug, PartialEq)]
pub struct CriticalPath {
    /// Sum of the durations along the path, µs.
    pub length_us: f64,
    /// The nodes of the path, source first.
    pub nodes: Vec<usize>,
}

impl TaskGraph {
    /// The reachability relation.
    ///
    /// # Complexity
    /// O(V + E·V/128) time (one row union per edge of a node with several successors, in
    /// reverse topological order, over the columns after the row's own), at most V²/16 bytes
    /// (25 MB for 20,000 nodes), and far less when most nodes have one successor: those share
    /// their successor's row ([`Reachability`]).
    pub fn reachability(&self) -> Reachability {
        self.reachability_and_reduction().0
    }

    /// The minimum equivalent graph: the fewest edges with the same reachability. For a DAG it is
    /// unique and equals the transitive reduction. Returned as successor lists by node index,
    /// each list in topological order.
    ///
    /// # Arguments
    /// * `reachability` – this graph's [`TaskGraph::reachability`].
    ///
    /// # Complexity
    /// O(Σ d²) lookups for out-degrees d: each node's successors are visited in topological
    /// order, and an edge `u -> v` is kept only if no kept earlier successor reaches `v`.
    ///
    /// petgraph's `dag_transitive_reduction_closure` computes the same reduction but also
    /// materialises the closure as adjacency lists, which for a chain-like 20,000-node DNN graph
    /// holds about 2×10⁸ edges; this version needs only the bit rows.
    pub fn transitive_reduction(&self, reachability: &Reachability) -> Adjacency {
        let position = self.topological_position();
        let mut successors = Vec::new();
        let lists: Vec<Vec<usize>> = (0..self.len())
            .map(|u| {
                successors.clear();
                successors.extend_from_slice(self.successors(u));
                successors.sort_unstable_by_key(|&v| position[v]);
                let mut kept: Vec<usize> = Vec::with_capacity(successors.len());
                for &v in &successors {
                    // A successor reached through another successor is reached through an earlier
                    // one in topological order, which is kept or itself reached from a kept one.
                    if !kept.iter().any(|&w| reachability.reaches(w, v)) {
                        kept.push(v);
                    }
                }
                kept
            })
            .collect();
        Adjacency::from_lists(&lists)
    }

    /// The reachability relation and the minimum equivalent graph in one pass: what
    /// [`TaskGraph::reachability`] and [`TaskGraph::transitive_reduction`] return.
    ///
    /// # Complexity
    /// That of [`TaskGraph::reachability`]. Nodes are visited in reverse topological order and
    /// each one's successors in topological order; a successor already in the node's row is
    /// reached through an earlier kept successor, so its edge is redundant and its row adds
    /// nothing. A node's only edge is never redundant.
    pub fn reachability_and_reduction(&self) -> (Reachability, Adjacency) {
        Reachability::with_reduction(self)
    }

    /// The heaviest path by `duration_us`; ties go to the first-listed predecessor and the
    /// lowest-index end node. An empty graph has an empty path of length 0.
    ///
    /// # Complexity
    /// O(V + E).
    pub fn critical_path(&self) -> CriticalPath {
        let n = self.len();
        let mut finish = vec![0.0f64; n];
        let mut best_predecessor = vec![None; n];
        for &v in self.topological_order() {
            let mut start = 0.0;
            for &u in self.predecessors(v) {
                if best_predecessor[v].is_none() || finish[u] > start {
                    start = finish[u];
                    best_predecessor[v] = Some(u);
                }
            }
            finish[v] = start + self.duration_or_zero(v);
        }
        let Some(end) = (0..n).max_by(|&a, &b| finish[a].total_cmp(&finish[b]).then(b.cmp(&a)))
        else {
            return CriticalPath { length_us: 0.0, nodes: Vec::new() };
        };
        let mut nodes = vec![end];
        while let Some(u) = best_predecessor[*nodes.last().expect("path is non-empty")] {
            nodes.push(u);
        }
        nodes.reverse();
        CriticalPath { length_us: finish[end], nodes }
    }

    /// The width: the size of the largest set of pairwise independent nodes (a maximum
    /// antichain). It is the most tasks that can ever run at once, and the fewest streams with
    /// which every pair of independent tasks can sit on different streams.
    ///
    /// # Complexity
    /// By Dilworth's theorem the width is `V − |M|` for a maximum matching `M` of the bipartite
    /// graph of the reachability relation. The matching is seeded with Hopcroft–Karp on the
    /// minimum equivalent graph (O(E·√V)), then completed by augmenting phases over the bit rows,
    /// O(V²/64) each.
    pub fn width(&self, reachability: &Reachability) -> usize {
        let n = self.len();
        let reduced = self.transitive_reduction(reachability);
        // The seed in node indices, moved to the rows' topological positions.
        let position = reachability.position();
        let mut seed = Matching::empty(n, n);
        for (u, v) in hopcroft_karp(n, &reduced).pairs() {
            seed.right_of[position[u]] = Some(position[v]);
            seed.left_of[position[v]] = Some(position[u]);
        }
        let rows = reachability.rows_at(0..n);
        n - augment_dense(n, n, |p| rows.row(p), seed).size()
    }
}
