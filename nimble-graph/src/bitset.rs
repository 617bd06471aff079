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

/// One row of a bit relation as a window of words: words before `first_word` are empty, and so
/// are those past the end of `words`.
#[derive(Clone, Copy, Debug)]
pub struct RowRef<'a> {
    pub first_word: usize,
    pub words: &'a [u64],
}

impl RowRef<'_> {
    /// Word `i` of the row.
    pub fn word(&self, i: usize) -> u64 {
        i.checked_sub(self.first_word).and_then(|k| self.words.get(k)).copied().unwrap_or(0)
    }

    /// One past the last word that may be non-empty.
    pub fn end_word(&self) -> usize {
        self.first_word + self.words.len()
    }
}

impl BitMatrix {
    /// Row `r` as a [`RowRef`].
    pub fn row_ref(&self, r: usize) -> RowRef<'_> {
        RowRef { first_word: 0, words: self.row(r) }
    }
}

/// An upper-triangular `n × n` bit relation: row `p` holds only columns from `p` on (rounded
/// down to its word), which is all a relation such as "reaches", with rows and columns in
/// topological order, can hold. Half the memory of a [`BitMatrix`], and unions touch half the
/// words.
///
/// Each row also keeps the span of words that may be non-zero, so unions, lookups and scans skip
/// the rest: the rows of a sparse relation (a wide random DAG's, where many tasks reach little)
/// cost what they hold, not what they could.
#[derive(Clone, Debug)]
pub struct TriangularRows {
    offsets: Vec<usize>,
    /// Per row, words `[start, end)` (absolute word indices) may be non-zero; empty when equal.
    spans: Vec<(u32, u32)>,
    words: Vec<u64>,
}

impl TriangularRows {
    /// An all-zero relation over `0..n`.
    pub fn new(n: usize) -> Self {
        let words_per_row = n.div_ceil(64);
        let mut offsets = Vec::with_capacity(n + 1);
        let mut total = 0;
        for p in 0..n {
            offsets.push(total);
            total += words_per_row - p / 64;
        }
        offsets.push(total);
        TriangularRows { offsets, spans: vec![(0, 0); n], words: vec![0; total] }
    }

    /// Row `p`, as the window of its possibly non-zero words.
    pub fn row_ref(&self, p: usize) -> RowRef<'_> {
        let (start, end) = self.spans[p];
        if start == end {
            return RowRef { first_word: p / 64, words: &[] };
        }
        let base = self.offsets[p] - p / 64;
        RowRef { first_word: start as usize, words: &self.words[base + start as usize..base + end as usize] }
    }

    /// Whether bit `(p, q)` is set (never for `q` below row `p`'s first word).
    pub fn get(&self, p: usize, q: usize) -> bool {
        let (start, end) = self.spans[p];
        let w = q / 64;
        (start as usize..end as usize).contains(&w) && self.words[self.offsets[p] + w - p / 64] >> (q % 64) & 1 == 1
    }

    /// Sets bit `(p, q)`, `q >= p`.
    pub fn set(&mut self, p: usize, q: usize) {
        debug_assert!(q >= p, "a triangular relation holds columns from its row on");
        self.words[self.offsets[p] + q / 64 - p / 64] |= 1 << (q % 64);
        self.widen(p, q / 64, q / 64 + 1);
    }

    /// Row `p` |= row `q`, for `q > p`.
    pub fn union_rows(&mut self, p: usize, q: usize) {
        debug_assert!(q > p, "a triangular row takes unions of later rows only");
        let (start, end) = self.spans[q];
        if start == end {
            return;
        }
        let (start, end) = (start as usize, end as usize);
        let (low, high) = self.words.split_at_mut(self.offsets[q]);
        let source = &high[start - q / 64..end - q / 64];
        let base = self.offsets[p] - p / 64;
        let target = &mut low[base + start..base + end];
        for (t, s) in target.iter_mut().zip(source) {
            *t |= s;
        }
        self.widen(p, start, end);
    }

    /// Extends row `p`'s span over words `[start, end)`; the words between are zero, as every
    /// word outside a span is.
    fn widen(&mut self, p: usize, start: usize, end: usize) {
        let span = &mut self.spans[p];
        *span = if span.0 == span.1 { (start as u32, end as u32) } else { (span.0.min(start as u32), span.1.max(end as u32)) };
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
    pub fn first_in_row_not_in_set(&self, row: RowRef<'_>, from_word: usize) -> Option<(usize, usize)> {
        (from_word.max(row.first_word)..row.end_word()).find_map(|w| {
            let free = row.word(w) & !self.words[w];
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
        assert_eq!(visited.first_in_row_not_in_set(m.row_ref(0), 0), Some((70, 1)));
        visited.insert(70);
        assert_eq!(visited.first_in_row_not_in_set(m.row_ref(0), 1), Some((150, 2)));
        visited.insert(150);
        assert_eq!(visited.first_in_row_not_in_set(m.row_ref(0), 0), None);
    }

    #[test]
    fn triangular_rows_hold_and_join_later_columns() {
        let mut t = TriangularRows::new(200);
        t.set(70, 71);
        t.set(150, 199);
        t.set(3, 64);
        t.union_rows(70, 150);
        t.union_rows(3, 70);
        assert!(t.get(3, 64) && t.get(3, 71) && t.get(3, 199) && !t.get(3, 150));
        assert!(t.get(70, 71) && t.get(70, 199) && !t.get(150, 70));
        let row = t.row_ref(70);
        assert_eq!((row.first_word, row.end_word()), (1, 4));
        assert_eq!(row.word(0), 0);
        assert_eq!(ones(row.words).map(|b| b + 64 * row.first_word).collect::<Vec<_>>(), vec![71, 199]);
    }
}
