//! `nimble` and `nimble-chains`: the stream assignment of Nimble (Kwon et al., NeurIPS 2020).

use nimble_graph::bitset::{BitMatrix, BitSet};
use nimble_graph::matching::{hopcroft_karp, hopcroft_karp_rows, Matching};
use nimble_graph::Adjacency;

use crate::{Analysis, StreamAssigner, StreamPlan};

/// A decomposition of the nodes into chains, each a path of the minimum equivalent graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chains {
    /// |M|: size of the maximum matching of the MEG's bipartite graph.
    pub matching_size: usize,
    /// The chains, each listed from head to tail; `|V| − |M|` of them.
    pub chains: Adjacency,
}

/// Steps 1–3 of the paper's Algorithm 1: build the bipartite graph with a left and a right copy
/// of every node and an edge `left(u) – right(v)` per MEG edge `u -> v`, find a maximum
/// matching `M`, and follow matched edges into `|V| − |M|` chains.
///
/// # Complexity
/// O(E'·√V) for the E' MEG edges (Hopcroft–Karp).
pub fn chain_decomposition(analysis: &Analysis<'_>) -> Chains {
    let n = analysis.graph().len();
    let matching = match analysis.stream_classes() {
        None => hopcroft_karp(n, analysis.meg_successors()),
        // A chain never joins nodes of two stream classes.
        Some(class) => {
            hopcroft_karp(n, &analysis.meg_successors().filtered(|u, v| class[v] == class[u]))
        }
    };
    let chains = follow(&matching, n);
    Chains { matching_size: matching.size(), chains }
}

/// The reference implementation's second step: chain `i` may run before chain `j` on one
/// stream when `i`'s tail reaches `j`'s head. A maximum matching on that relation joins chains
/// into `chains − |M₂|` streams. Every pair of nodes on a stream is still ordered by
/// reachability, so no concurrency is lost, while streams (and host launch cost per branch)
/// drop.
///
/// Returns `|M₂|` and, per stream, its chains in execution order (list `s` of the
/// [`Adjacency`] is stream `s`).
///
/// # Complexity
/// O(C·V/64) per phase of the matching for C chains (`hopcroft_karp_rows` on the tails'
/// reachability rows, masked to the heads): the same matching as Hopcroft–Karp on the lists of
/// related chain pairs, of which there are up to C²/2.
pub fn merge_chains(analysis: &Analysis<'_>, chains: &Chains) -> (usize, Adjacency) {
    let n = analysis.graph().len();
    let mut heads = BitSet::new(n);
    let mut chain_of_head = vec![usize::MAX; n];
    for (c, chain) in chains.chains.iter().enumerate() {
        heads.insert(chain[0]);
        chain_of_head[chain[0]] = c;
    }
    // Left: chains by tail; right: head nodes, as the reachability rows number them (topological
    // positions). Chains are numbered in the order of their heads' indices; when positions are
    // indices, a tail's row scanned in order lists related chains in order, as the matching's
    // definition on lists wants. Otherwise (or when stream classes must stay apart) the chain
    // relation is built as rows of its own.
    let reach = analysis.reachability();
    let c = chains.chains.len();
    let tails = reach.rows_at(chains.chains.iter().map(|chain| reach.position()[*chain.last().expect("chains are non-empty")]));
    let tail_row = |chain: usize| tails.row(chain);
    let classes = analysis.stream_classes();
    let class_of_chain = |chain: usize| classes.map_or(0, |class| class[chains.chains[chain][0]]);
    let pairs: Vec<(usize, usize)> = if reach.in_index_order() && classes.is_none() {
        hopcroft_karp_rows(c, &heads, tail_row).pairs().map(|(chain, head)| (chain, chain_of_head[head])).collect()
    } else {
        let order = analysis.graph().topological_order();
        let mut related = BitMatrix::new(c, c);
        for chain in 0..c {
            let row = tail_row(chain);
            for q in nimble_graph::bitset::ones(row.words).map(|bit| bit + 64 * row.first_word) {
                if heads.contains(order[q]) && class_of_chain(chain_of_head[order[q]]) == class_of_chain(chain) {
                    related.set(chain, chain_of_head[order[q]]);
                }
            }
        }
        let mut all = BitSet::new(c);
        (0..c).for_each(|chain| all.insert(chain));
        hopcroft_karp_rows(c, &all, |chain| related.row_ref(chain)).pairs().collect()
    };
    let mut matching = Matching::empty(chains.chains.len(), chains.chains.len());
    for (tail_chain, head_chain) in pairs {
        matching.right_of[tail_chain] = Some(head_chain);
        matching.left_of[head_chain] = Some(tail_chain);
    }
    let streams = follow(&matching, chains.chains.len());
    (matching.size(), streams)
}

/// Each node's stream when the chains are merged into `streams` (list `s` holds stream `s`'s
/// chains, as [`merge_chains`] returns them).
pub(crate) fn stream_of_merged(chains: &Chains, streams: &Adjacency, n: usize) -> Vec<usize> {
    let mut stream_of = vec![0; n];
    for (stream, members) in streams.iter().enumerate() {
        for &chain in members {
            for &v in &chains.chains[chain] {
                stream_of[v] = stream;
            }
        }
    }
    stream_of
}

/// Splits `0..n` into sequences along matched pairs `u -> right_of[u]`, starting from the
/// vertices no one is matched to, in index order.
pub(crate) fn follow(matching: &Matching, n: usize) -> Adjacency {
    let mut sequences = Adjacency::with_capacity(n - matching.size(), n);
    for head in (0..n).filter(|&v| matching.left_of[v].is_none()) {
        sequences.push_list(std::iter::successors(Some(head), |&current| matching.right_of[current]));
    }
    sequences
}

/// Nimble's stream assignment: Algorithm 1 of "Nimble: Lightweight and Parallel GPU Task
/// Scheduling for Deep Learning" (Kwon, Yu, Jeong, Chun, NeurIPS 2020).
///
/// 1. Take the minimum equivalent graph G' (the transitive reduction).
/// 2. Find a maximum matching of the bipartite graph of G' (Hopcroft–Karp).
/// 3. Follow matched edges into `|V| − |M|` chains; each chain gets a stream.
/// 4. With `merge_chains` (the registry's `nimble`), join chains whose tail reaches the next
///    one's head, as the authors' reference code does, by a second maximum matching.
/// 5. Sync only on cross-stream MEG edges that stream order and earlier syncs do not imply.
///
/// Guarantees (the paper's Theorems 1 and 2): maximum logical concurrency (independent tasks
/// never share a stream) and at most `|E'| − |M|` syncs, since matched edges stay on one stream.
/// Nodes of different [stream classes](Analysis::stream_classes) (collectives, compute) never
/// share a stream: the matchings only pair nodes and chains of one class.
/// The reference code waited on every cross-stream parent; this one drops implied waits.
///
/// # Complexity
/// O(E·V/64) for the analysis, O(E'·√V) for the matching, O(C·V/64 + R·√C) for the merge and
/// O(V + E') for the syncs. About 2 ms for a 10,000-node DNN-like graph, analysis included
/// (README, "Speed of nimble").
///
/// # Example
/// ```
/// use nimble_graph::SyntheticSpec;
/// use nimble_sched::{Analysis, StreamAssigner, algorithms::Nimble};
/// let graph = SyntheticSpec::Fan { branches: 4, depth: 3 }.generate();
/// let plan = Nimble { merge_chains: true }.assign(&Analysis::new(&graph));
/// assert_eq!(plan.streams, 4); // the four branches run concurrently
/// ```
pub struct Nimble {
    /// Join chains into fewer streams (the reference code's step); `false` is Algorithm 1 as
    /// printed in the paper.
    pub merge_chains: bool,
}

impl StreamAssigner for Nimble {
    fn name(&self) -> String {
        if self.merge_chains { "nimble".into() } else { "nimble-chains".into() }
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let chains = chain_decomposition(analysis);
        let n = analysis.graph().len();
        let stream_of = if self.merge_chains {
            let (_, streams) = merge_chains(analysis, &chains);
            stream_of_merged(&chains, &streams, n)
        } else {
            let mut stream_of = vec![0; n];
            for (stream, chain) in chains.chains.iter().enumerate() {
                for &v in chain {
                    stream_of[v] = stream;
                }
            }
            stream_of
        };
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, None)
    }
}
