//! Maximum bipartite matching: Hopcroft–Karp on adjacency lists, and augmenting-path search on a
//! dense relation held as bit rows.
//!
//! Nimble's stream assignment matches the left and right copies of the nodes of the minimum
//! equivalent graph; the width of a DAG (Dilworth) matches them over the reachability relation.
//! petgraph offers only general-graph matching (Gabow), which is far slower on these bipartite
//! inputs, and the paper's reference code used Kuhn's O(V³) algorithm on dense matrices.

use crate::bitset::{BitMatrix, BitSet};

/// A matching between left vertices `0..left` and right vertices `0..right`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matching {
    /// `right_of[u]`: the right vertex matched to left vertex `u`.
    pub right_of: Vec<Option<usize>>,
    /// `left_of[v]`: the left vertex matched to right vertex `v`.
    pub left_of: Vec<Option<usize>>,
}

impl Matching {
    /// The empty matching.
    pub fn empty(left: usize, right: usize) -> Self {
        Matching { right_of: vec![None; left], left_of: vec![None; right] }
    }

    /// Number of matched pairs.
    pub fn size(&self) -> usize {
        self.right_of.iter().filter(|m| m.is_some()).count()
    }

    /// The matched pairs `(left, right)`, by left vertex.
    pub fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.right_of.iter().enumerate().filter_map(|(u, v)| v.map(|v| (u, v)))
    }

    fn link(&mut self, u: usize, v: usize) {
        self.right_of[u] = Some(v);
        self.left_of[v] = Some(u);
    }

    /// Flips the augmenting path described by `stack`: each frame is a left vertex and the right
    /// vertex through which the search entered it (`None` for the root); `free` is the unmatched
    /// right vertex found from the top frame.
    fn augment(&mut self, stack: &[(usize, Option<usize>)], free: usize) {
        let mut next = free;
        for &(u, via) in stack.iter().rev() {
            self.link(u, next);
            match via {
                Some(v) => next = v,
                None => break,
            }
        }
    }
}

/// Maximum matching of a bipartite graph given as adjacency lists from left to right vertices.
///
/// # Arguments
/// * `right` – number of right vertices; every entry of `adjacency` must be below it.
/// * `adjacency` – `adjacency[u]` lists the right neighbours of left vertex `u`.
///
/// # Returns
/// A maximum-cardinality [`Matching`].
///
/// # Complexity
/// O(E·√V) time (Hopcroft and Karp, 1973), O(V) extra space. Both phases are iterative, so
/// long augmenting paths (a 20,000-node chain) cannot overflow the stack.
///
/// # Example
/// ```
/// use nimble_graph::matching::hopcroft_karp;
/// // left 0 – right {0, 1}, left 1 – right {0}: both can be matched.
/// let m = hopcroft_karp(2, &[vec![0, 1], vec![0]]);
/// assert_eq!(m.size(), 2);
/// ```
pub fn hopcroft_karp(right: usize, adjacency: &[Vec<usize>]) -> Matching {
    const UNREACHED: u32 = u32::MAX;
    let left = adjacency.len();
    let mut matching = Matching::empty(left, right);
    let mut layer = vec![UNREACHED; left];
    let mut queue = Vec::with_capacity(left);
    let mut next_edge = vec![0usize; left];
    let mut stack: Vec<(usize, Option<usize>)> = Vec::new();
    loop {
        // BFS from every free left vertex, layering left vertices by alternating-path length.
        queue.clear();
        for (u, layer_of_u) in layer.iter_mut().enumerate() {
            if matching.right_of[u].is_none() {
                *layer_of_u = 0;
                queue.push(u);
            } else {
                *layer_of_u = UNREACHED;
            }
        }
        let mut found_free_right = false;
        let mut head = 0;
        while head < queue.len() {
            let u = queue[head];
            head += 1;
            for &v in &adjacency[u] {
                match matching.left_of[v] {
                    None => found_free_right = true,
                    Some(w) if layer[w] == UNREACHED => {
                        layer[w] = layer[u] + 1;
                        queue.push(w);
                    }
                    Some(_) => {}
                }
            }
        }
        if !found_free_right {
            return matching;
        }
        // DFS along the layers for vertex-disjoint shortest augmenting paths.
        next_edge.fill(0);
        for root in 0..left {
            if matching.right_of[root].is_some() {
                continue;
            }
            stack.clear();
            stack.push((root, None));
            while let Some(&(u, _)) = stack.last() {
                let Some(&v) = adjacency[u].get(next_edge[u]) else {
                    layer[u] = UNREACHED; // dead end for the rest of this phase
                    stack.pop();
                    continue;
                };
                next_edge[u] += 1;
                match matching.left_of[v] {
                    None => {
                        matching.augment(&stack, v);
                        break;
                    }
                    // Frames on the stack always have a finite layer, so `+ 1` cannot overflow.
                    Some(w) if layer[w] == layer[u] + 1 => {
                        stack.push((w, Some(v)));
                    }
                    Some(_) => {}
                }
            }
        }
    }
}

/// Extends `matching` to a maximum matching of the relation `rows` (left vertex `u` may match
/// right vertex `v` when bit `(u, v)` is set).
///
/// Meant for dense relations such as reachability, seeded with a good matching of a sparse
/// sub-relation (the MEG), so that few augmenting phases remain.
///
/// # Complexity
/// Each phase visits every right vertex at most once and scans rows a word at a time:
/// O(V²/64) per phase; phases stop when one finds no augmenting path.
pub fn augment_dense(rows: &BitMatrix, mut matching: Matching) -> Matching {
    let left = rows.rows();
    let mut visited = BitSet::new(rows.columns());
    // Frames: (left vertex, right vertex we came through, word where its row scan resumes).
    let mut stack: Vec<(usize, Option<usize>)> = Vec::new();
    let mut resume: Vec<usize> = Vec::new();
    loop {
        visited.clear();
        let mut augmented = false;
        for root in 0..left {
            if matching.right_of[root].is_some() {
                continue;
            }
            stack.clear();
            resume.clear();
            stack.push((root, None));
            resume.push(0);
            while let Some(&(u, _)) = stack.last() {
                let top = stack.len() - 1;
                let Some((v, word)) = visited.first_in_row_not_in_set(rows.row(u), resume[top]) else {
                    stack.pop();
                    resume.pop();
                    continue;
                };
                resume[top] = word;
                visited.insert(v);
                match matching.left_of[v] {
                    None => {
                        matching.augment(&stack, v);
                        augmented = true;
                        break;
                    }
                    Some(w) => {
                        stack.push((w, Some(v)));
                        resume.push(0);
                    }
                }
            }
        }
        // Once a phase changes nothing, the shared `visited` marks were all valid for the final
        // matching, so no augmenting path exists and the matching is maximum.
        if !augmented {
            return matching;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_augmenting_path_through_matched_vertices() {
        // Greedy would match 0-0 and leave 1 unmatched; HK must re-route 0 to 1.
        let m = hopcroft_karp(2, &[vec![0, 1], vec![0]]);
        assert_eq!(m.size(), 2);
        assert_eq!(m.right_of, vec![Some(1), Some(0)]);
        assert_eq!(m.left_of, vec![Some(1), Some(0)]);
    }

    #[test]
    fn empty_and_isolated_vertices() {
        assert_eq!(hopcroft_karp(0, &[]).size(), 0);
        assert_eq!(hopcroft_karp(3, &[vec![], vec![2], vec![]]).size(), 1);
    }

    #[test]
    fn dense_augmentation_matches_sparse_result() {
        let adjacency = vec![vec![0, 1], vec![0], vec![1, 2], vec![2]];
        let mut rows = BitMatrix::new(4, 3);
        for (u, vs) in adjacency.iter().enumerate() {
            for &v in vs {
                rows.set(u, v);
            }
        }
        let dense = augment_dense(&rows, Matching::empty(4, 3));
        assert_eq!(dense.size(), hopcroft_karp(3, &adjacency).size());
        for (u, v) in dense.pairs() {
            assert!(rows.get(u, v));
        }
    }
}
