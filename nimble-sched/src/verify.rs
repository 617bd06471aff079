//! The schedule checker: does a plan enforce every dependency, and how concurrent is it?

use std::fmt;

use crate::analysis::Analysis;
use crate::error::{Result, SchedError};
use crate::plan::StreamPlan;
use crate::happens_before::RowClocks;
use crate::sparse_clocks::SparseClocks;
use nimble_graph::TaskGraph;

/// A way a plan can be wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// `stream_of` or `order` has the wrong length, or `order` is not a permutation of the nodes.
    Malformed(String),
    /// A node's stream is not below `streams`.
    StreamOutOfRange { node: usize, stream: usize },
    /// `order` issues `to` before its dependency `from`.
    OrderNotTopological { from: usize, to: usize },
    /// A sync names a node that does not exist.
    SyncOutOfRange { from: usize, to: usize },
    /// A sync waits on an event recorded later in issue order: CUDA treats a wait on an event
    /// not yet recorded as already satisfied, so it orders nothing.
    SyncBeforeRecord { from: usize, to: usize },
    /// Dependency `from -> to` is enforced by neither stream order nor a chain of syncs.
    UnenforcedDependency { from: usize, to: usize },
}

impl Violation {
    /// The violation with every node named by its id in `graph` (what the user's graph file
    /// calls it) instead of its index.
    pub fn describe(&self, graph: &TaskGraph) -> String {
        let id = |v: usize| if v < graph.len() { format!("id {}", graph.id_of(v)) } else { format!("index {v}") };
        match self {
            Violation::Malformed(why) => format!("malformed plan: {why}"),
            Violation::StreamOutOfRange { node, stream } => format!("node {} is on stream {stream}, beyond the plan's stream count", id(*node)),
            Violation::OrderNotTopological { from, to } => format!("issue order puts node {} before its dependency {}", id(*to), id(*from)),
            Violation::SyncOutOfRange { from, to } => format!("sync ({}, {}) names a node outside the graph", id(*from), id(*to)),
            Violation::SyncBeforeRecord { from, to } => format!("sync ({}, {}) waits on an event recorded later in issue order", id(*from), id(*to)),
            Violation::UnenforcedDependency { from, to } => format!("dependency {} -> {} is not enforced by stream order or syncs", id(*from), id(*to)),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Malformed(why) => write!(f, "malformed plan: {why}"),
            Violation::StreamOutOfRange { node, stream } => write!(f, "node {node} is on stream {stream}, beyond the plan's stream count"),
            Violation::OrderNotTopological { from, to } => write!(f, "issue order puts node {to} before its dependency {from}"),
            Violation::SyncOutOfRange { from, to } => write!(f, "sync ({from}, {to}) names a node outside the graph"),
            Violation::SyncBeforeRecord { from, to } => write!(f, "sync ({from}, {to}) waits on an event recorded later in issue order"),
            Violation::UnenforcedDependency { from, to } => write!(f, "dependency {from} -> {to} is not enforced by stream order or syncs"),
        }
    }
}

/// What [`verify`] found. Node numbers are indices into the graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    /// Everything wrong with the plan; empty for a valid plan.
    pub violations: Vec<Violation>,
    /// Streams used.
    pub streams: usize,
    /// Syncs in the plan.
    pub syncs: usize,
    /// Syncs `(u, v)` whose ordering stream order and the plan's other syncs already imply.
    pub redundant_syncs: Vec<(usize, usize)>,
    /// Whether no two independent nodes share a stream (the paper's maximum logical
    /// concurrency).
    pub max_logical_concurrency: bool,
    /// Two independent nodes sharing a stream, when there are any.
    pub serialized_pair: Option<(usize, usize)>,
    /// The graph's width: the most tasks that can run at once.
    pub width: usize,
}

impl Verification {
    /// Whether every dependency is enforced and the plan is well formed.
    pub fn is_valid(&self) -> bool {
        self.violations.is_empty()
    }
}

/// [`verify`], with an invalid plan as an error: what every caller that runs an algorithm
/// (the CLI, the Python package) does before using its plan.
///
/// # Errors
/// [`SchedError::InvalidPlan`] naming the algorithm and the first violation, its nodes by their
/// ids in the graph.
pub fn verified(analysis: &Analysis<'_>, plan: &StreamPlan) -> Result<Verification> {
    let report = verify(analysis, plan);
    match report.violations.first() {
        Some(violation) => Err(SchedError::InvalidPlan { algorithm: plan.algorithm.clone(), violation: violation.describe(analysis.graph()) }),
        None => Ok(report),
    }
}

/// Checks `plan` against the graph of `analysis`.
///
/// A dependency `u -> v` is enforced when `u` happens before `v`: `u` is earlier on `v`'s
/// stream, or a chain of stream order and syncs leads from `u` to `v`. Every edge of the graph
/// (not only of the MEG) is checked.
///
/// # Complexity
/// O(V + E + the sizes of the sparse clocks merged at syncs) time (`sparse_clocks`: a fan of
/// 100,000 branches checks in well under a second), plus the width computation. Where the sparse
/// clocks would outgrow V²/8 bytes (many streams that all hear of each other), bit rows instead:
/// O((V + S)·V/64) time for S syncs, V²/8 bytes.
pub fn verify(analysis: &Analysis<'_>, plan: &StreamPlan) -> Verification {
    let graph = analysis.graph();
    let n = graph.len();
    let mut report = Verification {
        violations: Vec::new(),
        streams: plan.streams,
        syncs: plan.syncs.len(),
        redundant_syncs: Vec::new(),
        max_logical_concurrency: false,
        serialized_pair: None,
        width: analysis.width(),
    };
    if let Some(problem) = shape_problem(n, plan) {
        report.violations.push(Violation::Malformed(problem));
        return report;
    }
    for (node, &stream) in plan.stream_of.iter().enumerate() {
        if stream >= plan.streams {
            report.violations.push(Violation::StreamOutOfRange { node, stream });
        }
    }
    if !report.violations.is_empty() {
        return report;
    }
    let mut position = vec![0; n];
    for (p, &v) in plan.order.iter().enumerate() {
        position[v] = p;
    }
    for (u, v) in graph.edges() {
        if position[u] > position[v] {
            report.violations.push(Violation::OrderNotTopological { from: u, to: v });
        }
    }

    // Effective syncs grouped by waiting node.
    let mut waits: Vec<Vec<usize>> = vec![Vec::new(); n];
    for &(u, v) in &plan.syncs {
        if u >= n || v >= n {
            report.violations.push(Violation::SyncOutOfRange { from: u, to: v });
        } else if position[u] >= position[v] {
            report.violations.push(Violation::SyncBeforeRecord { from: u, to: v });
        } else {
            waits[v].push(u);
        }
    }

    let (redundant_syncs, unenforced) = happens_before_check(graph, plan, &waits);
    report.redundant_syncs = redundant_syncs;
    report.violations.extend(unenforced.into_iter().map(|(from, to)| Violation::UnenforcedDependency { from, to }));

    let reach = analysis.reachability();
    report.serialized_pair = plan
        .stream_sequences()
        .iter()
        .flat_map(|sequence| sequence.windows(2).map(|pair| (pair[0], pair[1])))
        .find(|&(a, b)| !reach.reaches(a, b));
    report.max_logical_concurrency = report.serialized_pair.is_none();
    report
}

/// What the checker asks of a happens-before relation built node by node in issue order.
trait Clocks {
    /// Issues `v` on `stream` after syncs from `sources`; which of them the others imply, or
    /// `None` when this representation gave up (over its budget).
    fn issue(&mut self, v: usize, stream: usize, sources: &[usize]) -> Option<Vec<bool>>;
    /// Whether `u` finishes before `v`, the node issued last, starts.
    fn before_latest(&self, u: usize, v: usize) -> bool;
}

impl Clocks for SparseClocks {
    fn issue(&mut self, v: usize, stream: usize, sources: &[usize]) -> Option<Vec<bool>> {
        SparseClocks::issue(self, v, stream, sources)
    }

    fn before_latest(&self, u: usize, v: usize) -> bool {
        SparseClocks::before_latest(self, u, v)
    }
}

impl Clocks for RowClocks {
    fn issue(&mut self, v: usize, stream: usize, sources: &[usize]) -> Option<Vec<bool>> {
        Some(RowClocks::issue(self, v, stream, sources))
    }

    fn before_latest(&self, u: usize, v: usize) -> bool {
        RowClocks::before_latest(self, u, v)
    }
}

/// Redundant syncs and unenforced dependencies, both as `(u, v)` pairs.
type Findings = (Vec<(usize, usize)>, Vec<(usize, usize)>);

/// The syncs `(u, v)` that stream order and the plan's other syncs already imply, and the
/// dependencies `(u, v)` nothing orders: with sparse clocks, or bit rows where the clocks would
/// hold more entries than the rows hold bytes.
fn happens_before_check(graph: &TaskGraph, plan: &StreamPlan, waits: &[Vec<usize>]) -> Findings {
    let n = graph.len();
    let mut records = vec![false; n];
    for sources in waits {
        for &u in sources {
            records[u] = true;
        }
    }
    // A sparse clock's entry takes about 16 bytes, so V²/8 bytes of rows hold V²/128 of them.
    let budget = (n.saturating_mul(n) / 128).max(1 << 20);
    walk(graph, plan, waits, SparseClocks::new(plan.streams, records, budget))
        .or_else(|| walk(graph, plan, waits, RowClocks::new(n, plan.streams)))
        .unwrap_or_default()
}

fn walk(graph: &TaskGraph, plan: &StreamPlan, waits: &[Vec<usize>], mut clocks: impl Clocks) -> Option<Findings> {
    let (mut redundant_syncs, mut unenforced) = (Vec::new(), Vec::new());
    for &v in &plan.order {
        let sources = &waits[v];
        let redundant = clocks.issue(v, plan.stream_of[v], sources)?;
        redundant_syncs.extend(sources.iter().zip(redundant).filter(|&(_, r)| r).map(|(&u, _)| (u, v)));
        unenforced.extend(graph.predecessors(v).iter().filter(|&&u| !clocks.before_latest(u, v)).map(|&u| (u, v)));
    }
    Some((redundant_syncs, unenforced))
}

fn shape_problem(n: usize, plan: &StreamPlan) -> Option<String> {
    if plan.stream_of.len() != n {
        return Some(format!("stream_of has {} entries for {n} nodes", plan.stream_of.len()));
    }
    if plan.order.len() != n {
        return Some(format!("order has {} entries for {n} nodes", plan.order.len()));
    }
    let mut seen = vec![false; n];
    for &v in &plan.order {
        if v >= n || std::mem::replace(&mut seen[v], true) {
            return Some(format!("order is not a permutation of the nodes (node {v})"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithms;
    use crate::plan::{plan_syncs, streams_follow_reachability};
    use nimble_graph::SyntheticSpec;

    /// Sparse clocks and bit rows find the same redundant syncs and unenforced dependencies, on
    /// every algorithm's plans and on those plans with syncs dropped and duplicated.
    #[test]
    fn sparse_clocks_and_rows_find_the_same() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut random = |m: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m as u64) as usize
        };
        let mut unenforced_seen = 0;
        for spec in ["dnn:300:3", "layered:300:5", "nasnet:8", "fan:20:5"] {
            let graph = spec.parse::<SyntheticSpec>().expect("a valid spec").generate();
            let analysis = Analysis::new(&graph);
            for info in algorithms::ALGORITHMS {
                let mut plan = algorithms::by_name(info.name).expect("registered").assign(&analysis);
                if let Err(error) = verified(&analysis, &plan) {
                    panic!("{spec}: {error}");
                }
                for round in 0..3 {
                    if round > 0 && !plan.syncs.is_empty() {
                        let i = random(plan.syncs.len());
                        let sync = plan.syncs.remove(i);
                        if round == 2 {
                            plan.syncs.push(sync);
                            plan.syncs.push(sync);
                        }
                    }
                    let n = graph.len();
                    let mut waits = vec![Vec::new(); n];
                    for &(u, v) in &plan.syncs {
                        waits[v].push(u);
                    }
                    let records = (0..n).map(|u| plan.syncs.iter().any(|&(s, _)| s == u)).collect();
                    let sparse = walk(&graph, &plan, &waits, SparseClocks::new(plan.streams, records, usize::MAX));
                    let rows = walk(&graph, &plan, &waits, RowClocks::new(n, plan.streams));
                    assert_eq!(sparse, rows, "{spec} with {}, round {round}", info.name);
                    unenforced_seen += rows.map_or(0, |(_, unenforced)| unenforced.len());
                }
            }
        }
        assert!(unenforced_seen > 0, "dropping syncs never left a dependency unenforced");
    }

    /// Clocks over their budget give up, and the check still answers (with rows).
    #[test]
    fn clocks_over_budget_give_way_to_rows() {
        let graph = "layered:400:5".parse::<SyntheticSpec>().expect("a valid spec").generate();
        let analysis = Analysis::new(&graph);
        let plan = algorithms::by_name("greedy").expect("registered").assign(&analysis);
        let n = graph.len();
        let mut waits = vec![Vec::new(); n];
        for &(u, v) in &plan.syncs {
            waits[v].push(u);
        }
        let records = (0..n).map(|u| plan.syncs.iter().any(|&(s, _)| s == u)).collect();
        assert_eq!(walk(&graph, &plan, &waits, SparseClocks::new(plan.streams, records, 10)), None);
        let (redundant, unenforced) = happens_before_check(&graph, &plan, &waits);
        assert!(redundant.is_empty() && unenforced.is_empty(), "greedy's plan is valid and minimal");
    }

    /// The shortcut gives the syncs happens-before tracking gives, on every family and
    /// algorithm (only some of which keep streams in reachability order).
    #[test]
    fn shortcut_syncs_are_the_tracked_ones() {
        let mut shortcuts = 0;
        for spec in ["dnn:600:3", "layered:600:5", "nasnet:20", "fan:12:9", "chain:50"] {
            let graph = spec.parse::<SyntheticSpec>().expect("a valid spec").generate();
            let analysis = Analysis::new(&graph);
            for info in algorithms::ALGORITHMS {
                let plan = algorithms::by_name(info.name).expect("registered").assign(&analysis);
                // A broken algorithm fails here with the checker's message, before any diff.
                if let Err(error) = verified(&analysis, &plan) {
                    panic!("{spec}: {error}");
                }
                let mut position = vec![0; graph.len()];
                for (p, &v) in plan.order.iter().enumerate() {
                    position[v] = p;
                }
                let tracked = plan_syncs(&analysis, &plan.stream_of, plan.streams, &plan.order, &position, false);
                assert_eq!(plan.syncs, tracked, "{spec} with {}", info.name);
                shortcuts += usize::from(streams_follow_reachability(&analysis, &plan.stream_of, plan.streams, &plan.order));
            }
        }
        assert!(shortcuts >= 6, "the shortcut was taken {shortcuts} times");
    }
}
