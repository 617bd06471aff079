//! Dense bit rows: one row of `n` bits per node, for reachability-style relations.
//!
//! A 20,000-node graph needs 20,000 × 20,000 bits = 50 MB per matrix, which is affordable,
//! whereas the same relation as adjacency lists of a chain-like DNN graph would hold ~2×10⁸
//! entries. Rows are slices of `u64` words so unions and masked scans run a word at a time.

/// A `rows × columns` matrix of bits, stored row-major in 64-bit words.
#[derive(Clone, Debug)]
pub struct BitMatrix {
    rows: usize,
    columns: usize,
    words_per_row: usize,
    words: Vec<u64>,
}

impl BitMatrix {
    /// An all-zero matrix.
    pub fn new(rows: usize, columns: usize) -> Self {
        let words_per_row = columns.div_ceil(64);
        BitMatrix { rows, columns, words_per_row, words: vec![0; rows * words_per_row] }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (bits per row).
    pub fn columns(&self) -> usize {
        self.columns
    }

    /// The words of row `r`.
    pub fn row(&self, r: usize) -> &[u64] {
        &self.words[r * self.words_per_row..(r + 1) * self.words_per_row]
    }

    /// Whether bit `(r, c)` is set.
    pub fn get(&self, r: usize, c: usize) -> bool {
        self.words[r * self.words_per_row + c / 64] >> (c % 64) & 1 == 1
    }

    /// Sets bit `(r, c)`.
    pub fn set(&mut self, r: usize, c: usize) {
        self.words[r * self.words_per_row + c / 64] |= 1 << (c % 64);
    }

    /// Row `target` |= row `source`.
    pub fn union_rows(&mut self, target: usize, source: usize) {
        if target == source {
            return;
        }
        let w = self.words_per_row;
        // Split so we can read one row while writing another.
        let (low, high) = self.words.split_at_mut(target.max(source) * w);
        let (target_row, source_row) = if target < source {
            (&mut low[target * w..(target + 1) * w], &high[..w])
        } else {
            (&mut high[..w], &low[source * w..(source + 1) * w])
        };
        for (t, s) in target_row.iter_mut().zip(source_row) {
            *t |= s;
        }
    }

    /// Number of set bits in row `r`.
    pub fn count_row(&self, r: usize) -> usize {
        self.row(r).iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Set columns of row `r`, ascending.
    pub fn ones_in_row(&self, r: usize) -> impl Iterator<Item = usize> + '_ {
        ones(self.row(r))
    }
}

/// Indices of the set bits of a word slice, ascending.
pub fn ones(words: &[u64]) -> impl Iterator<Item = usize> + '_ {
    words.iter().enumerate().flat_map(|(i, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let bit = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            Some(i * 64 + bit)
        })
    })
}

/// A growable-free set of `len` bits.
#[derive(Clone, Debug)]
pub struct BitSet {
    words: Vec<u64>,
}

impl BitSet {
    /// An empty set over `0..len`.
    pub fn new(len: usize) -> Self {
        BitSet { words: vec![0; len.div_ceil(64)] }
    }

    /// Whether `i` is in the set.
    pub fn contains(&self, i: usize) -> bool {
        self.words[i / 64] >> (i % 64) & 1 == 1
    }

    /// Adds `i`.
    pub fn insert(&mut self, i: usize) {
        self.words[i / 64] |= 1 << (i % 64);
    }

    /// Removes `i`.
    pub fn remove(&mut self, i: usize) {
        self.words[i / 64] &= !(1 << (i % 64));
    }

    /// Removes every element.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Adds every element of a row of the same width.
    pub fn union_with(&mut self, row: &[u64]) {
        for (t, s) in self.words.iter_mut().zip(row) {
            *t |= s;
        }
    }

    /// The underlying words.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// The first element that is in `row` but not in this set, searching from word `from_word`;
    /// returns it with its word index, so a scan can resume there.
    pub fn first_in_row_not_in_set(&self, row: &[u64], from_word: usize) -> Option<(usize, usize)> {
        (from_word..row.len()).find_map(|w| {
            let free = row[w] & !self.words[w];
            (free != 0).then(|| (w * 64 + free.trailing_zeros() as usize, w))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_union_both_directions_and_count() {
        let mut m = BitMatrix::new(3, 130);
        m.set(0, 1);
        m.set(2, 129);
        m.union_rows(0, 2);
        m.union_rows(2, 0);
        assert_eq!(m.ones_in_row(0).collect::<Vec<_>>(), vec![1, 129]);
        assert_eq!(m.ones_in_row(2).collect::<Vec<_>>(), vec![1, 129]);
        assert_eq!(m.count_row(1), 0);
        assert!(m.get(2, 1) && !m.get(1, 1));
    }

    #[test]
    fn masked_scan_skips_members() {
        let mut m = BitMatrix::new(1, 200);
        for c in [3, 70, 150] {
            m.set(0, c);
        }
        let mut visited = BitSet::new(200);
        visited.insert(3);
        assert_eq!(visited.first_in_row_not_in_set(m.row(0), 0), Some((70, 1)));
        visited.insert(70);
        assert_eq!(visited.first_in_row_not_in_set(m.row(0), 1), Some((150, 2)));
        visited.insert(150);
        assert_eq!(visited.first_in_row_not_in_set(m.row(0), 0), None);
    }
}
