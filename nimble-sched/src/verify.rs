//! The schedule checker: does a plan enforce every dependency, and how concurrent is it?

use std::fmt;

use crate::analysis::Analysis;
use crate::error::{Result, SchedError};
use crate::plan::StreamPlan;
use crate::sparse_clocks::SparseClocks;

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
/// [`SchedError::InvalidPlan`] naming the algorithm and the first violation.
pub fn verified(analysis: &Analysis<'_>, plan: &StreamPlan) -> Result<Verification> {
    let report = verify(analysis, plan);
    match report.violations.first() {
        Some(violation) => Err(SchedError::InvalidPlan { algorithm: plan.algorithm.clone(), violation: violation.to_string() }),
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
/// O(V + E + the sizes of the sparse clocks merged at syncs) time (`sparse_clocks`): a fan of
/// 100,000 branches checks in well under a second), plus the width computation.
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

    let mut records = vec![false; n];
    for sources in &waits {
        for &u in sources {
            records[u] = true;
        }
    }
    // A sync is redundant when the stream predecessor and the *other* syncs already order its
    // source before v; each dependency must be ordered once v is issued.
    let mut clocks = SparseClocks::new(plan.streams, records);
    for &v in &plan.order {
        let sources = &waits[v];
        for (&u, redundant) in sources.iter().zip(clocks.issue(v, plan.stream_of[v], sources)) {
            if redundant {
                report.redundant_syncs.push((u, v));
            }
        }
        for &u in graph.predecessors(v) {
            if !clocks.before_latest(u, v) {
                report.violations.push(Violation::UnenforcedDependency { from: u, to: v });
            }
        }
    }

    let reach = analysis.reachability();
    report.serialized_pair = plan
        .stream_sequences()
        .iter()
        .flat_map(|sequence| sequence.windows(2).map(|pair| (pair[0], pair[1])))
        .find(|&(a, b)| !reach.reaches(a, b));
    report.max_logical_concurrency = report.serialized_pair.is_none();
    report
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
