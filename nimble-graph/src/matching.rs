//! Maximum bipartite matching: Hopcroft–Karp on adjacency lists, and augmenting-path search on a
//! dense relation held as bit rows.
//!
//! Nimble's stream assignment matches the left and right copies of the nodes of the minimum
//! equivalent graph; the width of a DAG (Dilworth) matches them over the reachability relation.
//! petgraph offers only general-graph matching (Gabow), which is far slower on these bipartite
//! inputs, and the paper's reference code used Kuhn's O(V³) algorithm on dense matrices.

use crate::adjacency::Adjacency;
use crate::bitset::{BitSet, RowRef};

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
/// use nimble_graph::{matching::hopcroft_karp, Adjacency};
/// // left 0 – right {0, 1}, left 1 – right {0}: both can be matched.
/// let m = hopcroft_karp(2, &Adjacency::from_lists(&[vec![0, 1], vec![0]]));
/// assert_eq!(m.size(), 2);
/// ```
pub fn hopcroft_karp(right: usize, adjacency: &Adjacency) -> Matching {
    const UNREACHED: u32 = u32::MAX;
    const NONE: u32 = u32::MAX;
    let left = adjacency.len();
    assert!(left < NONE as usize && right < NONE as usize && adjacency.edge_count() < NONE as usize, "hopcroft_karp numbers vertices and edges in 32 bits");
    // The lists and the matching as 32-bit numbers: the phases below walk them many times, and
    // compact arrays keep them in cache. The steps, and so the matching found, are those of
    // Hopcroft–Karp on the lists as given.
    let offsets: Vec<u32> = adjacency.offsets().iter().map(|&o| o as u32).collect();
    let targets: Vec<u32> = adjacency.targets().iter().map(|&v| v as u32).collect();
    let mut right_of = vec![NONE; left];
    let mut left_of = vec![NONE; right];
    let mut layer = vec![UNREACHED; left];
    let mut queue: Vec<u32> = Vec::with_capacity(left);
    let mut next_edge = vec![0u32; left];
    // Frames: a left vertex and the right vertex through which the search entered it.
    let mut stack: Vec<(u32, u32)> = Vec::new();
    // Before the first phase nothing is matched: every left vertex is free (layer 0), every edge
    // reaches a free right vertex, and the BFS below would find exactly that, so it is skipped.
    let mut first_phase = true;
    loop {
        // BFS from every free left vertex, layering left vertices by alternating-path length.
        queue.clear();
        for (u, layer_of_u) in layer.iter_mut().enumerate() {
            if right_of[u] == NONE {
                *layer_of_u = 0;
                queue.push(u as u32);
            } else {
                *layer_of_u = UNREACHED;
            }
        }
        let mut found_free_right = first_phase && !targets.is_empty();
        let mut head = if first_phase { queue.len() } else { 0 };
        first_phase = false;
        while head < queue.len() {
            let u = queue[head] as usize;
            head += 1;
            for &v in &targets[offsets[u] as usize..offsets[u + 1] as usize] {
                let w = left_of[v as usize];
                if w == NONE {
                    found_free_right = true;
                } else if layer[w as usize] == UNREACHED {
                    layer[w as usize] = layer[u] + 1;
                    queue.push(w);
                }
            }
        }
        if !found_free_right {
            let mut matching = Matching::empty(left, right);
            for (u, &v) in right_of.iter().enumerate().filter(|&(_, &v)| v != NONE) {
                matching.link(u, v as usize);
            }
            return matching;
        }
        // DFS along the layers for vertex-disjoint shortest augmenting paths.
        next_edge.copy_from_slice(&offsets[..left]);
        for root in 0..left {
            if right_of[root] != NONE {
                continue;
            }
            stack.clear();
            stack.push((root as u32, NONE));
            while let Some(&(u, _)) = stack.last() {
                let u = u as usize;
                if next_edge[u] == offsets[u + 1] {
                    layer[u] = UNREACHED; // dead end for the rest of this phase
                    stack.pop();
                    continue;
                }
                let v = targets[next_edge[u] as usize];
                next_edge[u] += 1;
                let w = left_of[v as usize];
                if w == NONE {
                    // Flip the path: each frame's vertex takes the right vertex found after it.
                    let mut next = v;
                    for &(x, via) in stack.iter().rev() {
                        right_of[x as usize] = next;
                        left_of[next as usize] = x;
                        next = via;
                    }
                    break;
                }
                // Frames on the stack always have a finite layer, so `+ 1` cannot overflow.
                if layer[w as usize] == layer[u] + 1 {
                    stack.push((w, v));
                }
            }
        }
    }
}

/// Extends `matching` to a maximum matching of a relation given by `row` (left vertex
/// `u < left` may match right vertex `v < columns` when bit `v` of `row(u)` is set).
///
/// Meant for dense relations such as reachability, seeded with a good matching of a sparse
/// sub-relation (the MEG), so that few augmenting phases remain.
///
/// # Complexity
/// Each phase visits every right vertex at most once and scans rows a word at a time:
/// O(V²/64) per phase; phases stop when one finds no augmenting path.
pub fn augment_dense<'a>(left: usize, columns: usize, row: impl Fn(usize) -> RowRef<'a>, mut matching: Matching) -> Matching {
    let mut visited = BitSet::new(columns);
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
                let Some((v, word)) = visited.first_in_row_not_in_set(row(u), resume[top]) else {
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

/// Hopcroft–Karp on a dense relation held as bit rows: left vertex `u` may match right vertex
/// `v` when `v` is in `allowed` and bit `v` of `row(u)` is set.
///
/// Gives exactly the matching [`hopcroft_karp`] gives on adjacency lists that list each row's
/// allowed bits in ascending order, without building those lists: a relation such as "chain
/// `i`'s tail reaches chain `j`'s head" holds up to C²/2 pairs for C chains, and building and
/// scanning them was most of the time of Nimble's chain merge.
///
/// Right vertices are numbered `0..64·W` for the `W` words of `allowed`; rows are windows of
/// words ([`RowRef`]), empty outside.
///
/// # Complexity
/// Each phase scans every reached row once a word at a time for the layering, and resumes each
/// row's scan where it stopped for the augmenting paths: O(L·R/64) per phase for L left and R
/// right vertices, plus O(R/64) per layer for the candidate sets.
pub fn hopcroft_karp_rows<'a>(left: usize, allowed: &BitSet, row: impl Fn(usize) -> RowRef<'a>) -> Matching {
    const UNREACHED: u32 = u32::MAX;
    let words = allowed.words().len();
    let right = words * 64;
    let mut matching = Matching::empty(left, right);
    let word_of = |r: RowRef<'_>, i: usize| r.word(i);
    let mut layer = vec![UNREACHED; left];
    let mut queue = Vec::with_capacity(left);
    let mut cursor = vec![0usize; left];
    let mut stack: Vec<(usize, Option<usize>)> = Vec::new();
    // Right vertices not matched yet, and (during layering) those whose partner is unreached.
    let mut free = allowed.clone();
    let mut unreached = BitSet::new(right);
    // Where each row's first allowed bit lies: scans start there.
    let first_word: Vec<usize> = (0..left)
        .map(|u| {
            let r = row(u);
            (r.first_word..r.end_word().min(words)).find(|&i| r.word(i) & allowed.words()[i] != 0).unwrap_or(words)
        })
        .collect();
    loop {
        // BFS from every free left vertex, as `hopcroft_karp` does; a matched right vertex is
        // followed to its partner the first time a row holds it (lowest row in queue order,
        // lowest bit within the row).
        queue.clear();
        unreached.clear();
        for (u, layer_of_u) in layer.iter_mut().enumerate() {
            match matching.right_of[u] {
                None => {
                    *layer_of_u = 0;
                    queue.push(u);
                }
                Some(v) => {
                    *layer_of_u = UNREACHED;
                    unreached.insert(v);
                }
            }
        }
        // Words that may hold an unreached vertex: rows are scanned for them only there.
        let mut unreached_words = Summary::of(&[unreached.words()]);
        let mut found_free_right = false;
        let mut head = 0;
        while head < queue.len() {
            let u = queue[head];
            head += 1;
            let r = row(u);
            // A straight scan of the row's words: cheaper than following the summary unless free
            // vertices are very few, and then the first phase's augmentations found most rows'.
            found_free_right = found_free_right || {
                let from = first_word[u].max(r.first_word);
                let to = r.end_word().min(words);
                from < to && r.words[from - r.first_word..to - r.first_word].iter().zip(&free.words()[from..to]).any(|(a, b)| a & b != 0)
            };
            unreached_words.visit_from(first_word[u], |i| {
                let mut reach = word_of(r, i) & unreached.words()[i];
                while reach != 0 {
                    let v = i * 64 + reach.trailing_zeros() as usize;
                    reach &= reach - 1;
                    let w = matching.left_of[v].expect("an unreached right vertex is matched");
                    layer[w] = layer[u] + 1;
                    queue.push(w);
                    unreached.remove(v);
                }
                (true, unreached.words()[i] != 0)
            });
        }
        if !found_free_right {
            return matching;
        }
        // The right vertices a left vertex of layer `l` may step to: the free ones, and those
        // whose partner is in layer `l + 1` (`by_layer[l + 1]`), kept up to date as partners
        // die and paths flip; `candidate_words[l]` covers the words of both.
        let layers = layer.iter().filter(|&&l| l != UNREACHED).max().map_or(0, |&l| l as usize + 1);
        let mut by_layer = vec![BitSet::new(right); layers + 1];
        let mut candidate_words = vec![Summary::of(&[free.words()]); layers + 1];
        for (w, &l) in layer.iter().enumerate() {
            if let (Some(v), true) = (matching.right_of[w], l != UNREACHED) {
                by_layer[l as usize].insert(v);
                candidate_words[l as usize].insert(v / 64);
            }
        }
        for (u, c) in cursor.iter_mut().enumerate() {
            *c = first_word[u] * 64;
        }
        for root in 0..left {
            if matching.right_of[root].is_some() {
                continue;
            }
            stack.clear();
            stack.push((root, None));
            while let Some(&(u, _)) = stack.last() {
                let next = layer[u] as usize + 1;
                let r = row(u);
                let (from, targets) = (cursor[u], &by_layer[next]);
                let mut found = None;
                candidate_words[next].visit_from(from / 64, |i| {
                    let allowed_here = free.words()[i] | targets.words()[i];
                    let mut candidates = word_of(r, i) & allowed_here;
                    if i == from / 64 {
                        candidates &= !0u64 << (from % 64);
                    }
                    if candidates != 0 {
                        found = Some(i * 64 + candidates.trailing_zeros() as usize);
                    }
                    (found.is_none(), allowed_here != 0)
                });
                let Some(v) = found else {
                    // A dead end for the rest of this phase: its partner leaves the candidates.
                    if let Some(v) = matching.right_of[u] {
                        by_layer[layer[u] as usize].remove(v);
                    }
                    layer[u] = UNREACHED;
                    cursor[u] = right;
                    stack.pop();
                    continue;
                };
                cursor[u] = v + 1;
                match matching.left_of[v] {
                    None => {
                        // Flip the path; every right vertex on it changes partner.
                        free.remove(v);
                        let mut next = v;
                        for &(w, via) in stack.iter().rev() {
                            if let Some(old) = matching.left_of[next] {
                                by_layer[layer[old] as usize].remove(next);
                            }
                            by_layer[layer[w] as usize].insert(next);
                            candidate_words[layer[w] as usize].insert(next / 64);
                            matching.right_of[w] = Some(next);
                            matching.left_of[next] = Some(w);
                            match via {
                                Some(previous) => next = previous,
                                None => break,
                            }
                        }
                        break;
                    }
                    Some(w) => stack.push((w, Some(v))),
                }
            }
        }
    }
}

/// Which words of one or more bit sets may be non-zero: one bit per word, a superset that
/// scans clear as they find words empty.
#[derive(Clone)]
struct Summary {
    bits: Vec<u64>,
}

impl Summary {
    /// The words non-zero in any of `sets` (all of one length).
    fn of(sets: &[&[u64]]) -> Summary {
        let mut bits = vec![0u64; sets[0].len().div_ceil(64)];
        for i in (0..sets[0].len()).filter(|&i| sets.iter().any(|s| s[i] != 0)) {
            bits[i / 64] |= 1 << (i % 64);
        }
        Summary { bits }
    }

    fn insert(&mut self, word: usize) {
        self.bits[word / 64] |= 1 << (word % 64);
    }

    /// Calls `step` on every marked word from `first` on, ascending, until it returns
    /// `(false, _)`; a word for which the second value is false is unmarked.
    fn visit_from(&mut self, first: usize, mut step: impl FnMut(usize) -> (bool, bool)) {
        for s in first / 64..self.bits.len() {
            let mut pending = self.bits[s];
            if s == first / 64 {
                pending &= !0u64 << (first % 64);
            }
            while pending != 0 {
                let bit = pending.trailing_zeros() as usize;
                pending &= pending - 1;
                let (go_on, keep) = step(s * 64 + bit);
                if !keep {
                    self.bits[s] &= !(1 << bit);
                }
                if !go_on {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_augmenting_path_through_matched_vertices() {
        // Greedy would match 0-0 and leave 1 unmatched; HK must re-route 0 to 1.
        let m = hopcroft_karp(2, &Adjacency::from_lists(&[vec![0, 1], vec![0]]));
        assert_eq!(m.size(), 2);
        assert_eq!(m.right_of, vec![Some(1), Some(0)]);
        assert_eq!(m.left_of, vec![Some(1), Some(0)]);
    }

    #[test]
    fn empty_and_isolated_vertices() {
        assert_eq!(hopcroft_karp(0, &Adjacency::from_lists::<Vec<usize>>(&[])).size(), 0);
        assert_eq!(hopcroft_karp(3, &Adjacency::from_lists(&[vec![], vec![2], vec![]])).size(), 1);
    }

    #[test]
    fn dense_augmentation_matches_sparse_result() {
        let adjacency = vec![vec![0, 1], vec![0], vec![1, 2], vec![2]];
        let mut rows = crate::bitset::BitMatrix::new(4, 3);
        for (u, vs) in adjacency.iter().enumerate() {
            for &v in vs {
                rows.set(u, v);
            }
        }
        let dense = augment_dense(4, 3, |u| rows.row_ref(u), Matching::empty(4, 3));
        assert_eq!(dense.size(), hopcroft_karp(3, &Adjacency::from_lists(&adjacency)).size());
        for (u, v) in dense.pairs() {
            assert!(rows.get(u, v));
        }
    }
}
