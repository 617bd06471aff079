//! `Adjacency`: neighbour lists of every node packed in one array (compressed sparse rows).
//!
//! The analyses hand out the MEG's successors and predecessors of 10,000-node graphs; as one
//! `Vec` per node those were 20,000 allocations per analysis, a quarter of the assignment's time.

use std::ops::Index;

/// Lists of neighbours by node: `adjacency[u]` is node `u`'s list, in the order it was given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Adjacency {
    /// List `u` is `targets[offsets[u]..offsets[u + 1]]`.
    offsets: Vec<usize>,
    targets: Vec<usize>,
}

impl Adjacency {
    /// The lists as given.
    pub fn from_lists<L: AsRef<[usize]>>(lists: &[L]) -> Self {
        let mut offsets = Vec::with_capacity(lists.len() + 1);
        let mut targets = Vec::with_capacity(lists.iter().map(|l| l.as_ref().len()).sum());
        offsets.push(0);
        for list in lists {
            targets.extend_from_slice(list.as_ref());
            offsets.push(targets.len());
        }
        Adjacency { offsets, targets }
    }

    /// No lists yet, with room for `lists` lists of `entries` entries in all.
    pub fn with_capacity(lists: usize, entries: usize) -> Self {
        let mut offsets = Vec::with_capacity(lists + 1);
        offsets.push(0);
        Adjacency { offsets, targets: Vec::with_capacity(entries) }
    }

    /// Appends a list after the others.
    pub fn push_list(&mut self, list: impl IntoIterator<Item = usize>) {
        self.targets.extend(list);
        self.offsets.push(self.targets.len());
    }

    /// Lists over nodes `0..nodes` from `(node, neighbour)` pairs: each node's list holds its
    /// neighbours in the order the pairs give them. The pairs are walked twice (a count, then
    /// the placing), so no list is grown.
    pub fn from_pairs(nodes: usize, pairs: impl Iterator<Item = (usize, usize)> + Clone) -> Self {
        let mut offsets = vec![0usize; nodes + 1];
        for (u, _) in pairs.clone() {
            offsets[u + 1] += 1;
        }
        for u in 0..nodes {
            offsets[u + 1] += offsets[u];
        }
        let mut next = offsets[..nodes].to_vec();
        let mut targets = vec![0usize; offsets[nodes]];
        for (u, v) in pairs {
            targets[next[u]] = v;
            next[u] += 1;
        }
        Adjacency { offsets, targets }
    }

    /// The reverse lists over nodes `0..nodes`: `v`'s list holds every `u` whose list holds
    /// `v`, ascending.
    pub fn reversed(&self, nodes: usize) -> Self {
        Adjacency::from_pairs(nodes, self.pairs().map(|(u, v)| (v, u)))
    }

    /// The same lists, keeping only the neighbours `keep(node, neighbour)` accepts.
    pub fn filtered(&self, mut keep: impl FnMut(usize, usize) -> bool) -> Self {
        let mut offsets = Vec::with_capacity(self.offsets.len());
        let mut targets = Vec::with_capacity(self.targets.len());
        offsets.push(0);
        for (u, list) in self.iter().enumerate() {
            targets.extend(list.iter().copied().filter(|&v| keep(u, v)));
            offsets.push(targets.len());
        }
        Adjacency { offsets, targets }
    }

    /// Number of lists (nodes).
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether there are no lists.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of entries over all lists (edges).
    pub fn edge_count(&self) -> usize {
        self.targets.len()
    }

    /// The lists in node order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[usize]> + Clone + '_ {
        self.offsets.windows(2).map(|w| &self.targets[w[0]..w[1]])
    }

    /// Every `(node, neighbour)` pair, by node then list order.
    pub fn pairs(&self) -> impl Iterator<Item = (usize, usize)> + Clone + '_ {
        self.iter().enumerate().flat_map(|(u, list)| list.iter().map(move |&v| (u, v)))
    }

    /// The lists as one `Vec` each.
    pub fn to_lists(&self) -> Vec<Vec<usize>> {
        self.iter().map(<[usize]>::to_vec).collect()
    }

    /// Where each list starts in [`Adjacency::targets`], and one past the last: `len() + 1`
    /// entries.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// All lists one after another.
    pub fn targets(&self) -> &[usize] {
        &self.targets
    }
}

impl Index<usize> for Adjacency {
    type Output = [usize];

    fn index(&self, u: usize) -> &[usize] {
        &self.targets[self.offsets[u]..self.offsets[u + 1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_pairs_and_reverse_agree() {
        let lists = vec![vec![2, 1], vec![], vec![0, 3], vec![]];
        let a = Adjacency::from_lists(&lists);
        assert_eq!((a.len(), a.edge_count()), (4, 4));
        assert_eq!(&a[0], &[2, 1]);
        assert!(a[1].is_empty());
        assert_eq!(a.to_lists(), lists);
        let pairs: Vec<(usize, usize)> = a.pairs().collect();
        assert_eq!(pairs, vec![(0, 2), (0, 1), (2, 0), (2, 3)]);
        assert_eq!(Adjacency::from_pairs(4, pairs.iter().copied()), a);
        assert_eq!(a.reversed(4).to_lists(), vec![vec![2], vec![0], vec![0], vec![2]]);
        assert_eq!(a.filtered(|u, v| u < v).to_lists(), vec![vec![2, 1], vec![], vec![3], vec![]]);
        assert!(Adjacency::from_lists::<Vec<usize>>(&[]).is_empty());
        let mut pushed = Adjacency::with_capacity(4, 4);
        for list in &lists {
            pushed.push_list(list.iter().copied());
        }
        assert_eq!(pushed, a);
    }
}
