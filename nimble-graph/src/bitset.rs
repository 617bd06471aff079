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

/// Bit rows of varying widths, appended one after another: row `r` covers the words
/// `[first_word, first_word + len)` it was given when pushed and is zero outside them.
///
/// A relation such as "reaches", built in reverse topological order, knows each row's span
/// before filling it (the union of the spans it joins), so rows take exactly the words they may
/// use: no zeroed matrix up front, and unions touch only the words that can hold bits.
#[derive(Clone, Debug)]
pub struct CompactRows {
    first_word: Vec<u32>,
    /// Row `r`'s words are `words[offsets[r]..offsets[r + 1]]`.
    offsets: Vec<usize>,
    words: Vec<u64>,
}

impl Default for CompactRows {
    fn default() -> Self {
        CompactRows::with_capacity(0, 0)
    }
}

impl CompactRows {
    /// No rows, with room for `rows` rows of `words` words in all.
    pub fn with_capacity(rows: usize, words: usize) -> Self {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        CompactRows { first_word: Vec::with_capacity(rows), offsets, words: Vec::with_capacity(words) }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.first_word.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.first_word.is_empty()
    }

    /// Appends an all-zero row over words `[start, end)` (absolute word indices) and returns its
    /// index; an empty span (`start >= end`) gives a row without words.
    pub fn push_zeroed(&mut self, start: usize, end: usize) -> usize {
        let len = end.saturating_sub(start);
        self.first_word.push(start as u32);
        self.words.resize(self.words.len() + len, 0);
        self.offsets.push(self.words.len());
        self.first_word.len() - 1
    }

    /// Appends a row over words `[start, end)` holding the bits of row `r` (an earlier row,
    /// whose words must lie within), and returns its index: a copy, cheaper than a zeroed row
    /// and a union.
    pub fn push_copy(&mut self, start: usize, end: usize, r: usize) -> usize {
        let (from, to) = (self.offsets[r], self.offsets[r + 1]);
        self.push_around(start, end, self.first_word[r] as usize, to - from, |words| words.extend_from_within(from..to))
    }

    /// Appends a row over words `[start, end)` holding the bits of `source` (whose words must
    /// lie within), and returns its index.
    pub fn push_copy_of(&mut self, start: usize, end: usize, source: RowRef<'_>) -> usize {
        self.push_around(start, end, source.first_word, source.words.len(), |words| words.extend_from_slice(source.words))
    }

    /// Appends a row over words `[start, end)`: zeros, then the `len` words that `copy` appends
    /// (absolute words `[first, first + len)`), then zeros.
    fn push_around(&mut self, start: usize, end: usize, first: usize, len: usize, copy: impl FnOnce(&mut Vec<u64>)) -> usize {
        if len == 0 {
            return self.push_zeroed(start, end);
        }
        self.first_word.push(start as u32);
        self.words.resize(self.words.len() + (first - start), 0);
        copy(&mut self.words);
        self.words.resize(self.words.len() + (end - (first + len)), 0);
        self.offsets.push(self.words.len());
        self.first_word.len() - 1
    }

    /// Row `r` as a window of words.
    pub fn row_ref(&self, r: usize) -> RowRef<'_> {
        RowRef { first_word: self.first_word[r] as usize, words: &self.words[self.offsets[r]..self.offsets[r + 1]] }
    }

    /// Whether bit `bit` of row `r` is set.
    pub fn get(&self, r: usize, bit: usize) -> bool {
        self.row_ref(r).word(bit / 64) >> (bit % 64) & 1 == 1
    }

    /// Sets bit `bit` of the last row, which must lie within its words.
    pub fn set_last(&mut self, bit: usize) {
        let r = self.len() - 1;
        let w = bit / 64 - self.first_word[r] as usize;
        self.words[self.offsets[r] + w] |= 1 << (bit % 64);
    }

    /// Last row |= row `r` (an earlier one), whose words must lie within the last row's.
    pub fn union_into_last(&mut self, r: usize) {
        let last = self.len() - 1;
        debug_assert!(r < last, "only an earlier row joins the last one");
        let (earlier, target) = self.words.split_at_mut(self.offsets[last]);
        let source = RowRef { first_word: self.first_word[r] as usize, words: &earlier[self.offsets[r]..self.offsets[r + 1]] };
        or_into(target, self.first_word[last] as usize, source);
    }
}

/// `target` (words from `target_first` on) |= `source`.
fn or_into(target: &mut [u64], target_first: usize, source: RowRef<'_>) {
    if source.words.is_empty() {
        return;
    }
    let at = source.first_word - target_first;
    for (t, s) in target[at..at + source.words.len()].iter_mut().zip(source.words) {
        *t |= s;
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
    fn compact_rows_hold_and_join_within_their_spans() {
        let mut rows = CompactRows::default();
        let a = rows.push_zeroed(2, 4);
        rows.set_last(150);
        rows.set_last(199);
        let b = rows.push_zeroed(0, 0);
        assert!(rows.row_ref(b).words.is_empty() && !rows.get(b, 5));
        let c = rows.push_zeroed(1, 4);
        rows.set_last(71);
        rows.union_into_last(a);
        assert!(rows.get(c, 71) && rows.get(c, 150) && rows.get(c, 199) && !rows.get(c, 70) && !rows.get(c, 0));
        assert!(rows.get(a, 150) && !rows.get(a, 71), "the source row is unchanged");
        let row = rows.row_ref(c);
        assert_eq!((row.first_word, row.end_word()), (1, 4));
        assert_eq!(row.word(0), 0);
        assert_eq!(ones(row.words).map(|b| b + 64 * row.first_word).collect::<Vec<_>>(), vec![71, 150, 199]);
        let d = rows.push_copy(0, 5, c);
        assert_eq!(ones(rows.row_ref(d).words).collect::<Vec<_>>(), vec![71, 150, 199]);
        assert_eq!(rows.row_ref(d).words.len(), 5);
        let e = rows.push_copy(1, 2, b);
        assert_eq!(rows.row_ref(e).words, &[0]);
        let mut other = CompactRows::default();
        other.push_copy_of(0, 5, rows.row_ref(c));
        assert!(other.get(0, 150) && other.get(0, 71) && !other.get(0, 300));
        assert_eq!(other.row_ref(0).words.len(), 5);
    }
}
