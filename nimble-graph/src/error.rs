//! The one error type of `nimble-graph`: everything a user-supplied graph can get wrong.

use thiserror::Error;

/// Why a task graph could not be built, read or written.
///
/// Every variant names the offending node or position, so a command-line tool can print the
/// message as is and a user can find the problem in their file.
#[derive(Debug, Error)]
pub enum GraphError {
    /// Two nodes were given the same id.
    #[error("duplicate node id {id}: node ids must be unique")]
    DuplicateId { id: u64 },

    /// An edge names an id that no node has.
    #[error("edge [{from}, {to}] names unknown node id {missing}: every edge endpoint must be the id of a node")]
    UnknownId { from: u64, to: u64, missing: u64 },

    /// An edge goes from a node to itself.
    #[error("self-edge on node {id}: a task cannot depend on itself")]
    SelfEdge { id: u64 },

    /// The dependencies contain a cycle; `cycle` lists the ids around it, first id repeated last.
    #[error("cycle in task graph through node {id} ({op}): {}", format_cycle(.cycle))]
    Cycle { id: u64, op: String, cycle: Vec<u64> },

    /// The JSON text is malformed or does not follow the task-graph schema.
    #[error("malformed task-graph JSON at line {line}, column {column}: {message}")]
    Json { line: usize, column: usize, message: String },

    /// A node's field is out of range: a duration that is negative, not finite or absurdly
    /// long, or an `sm_share` outside (0, 1].
    #[error("node {id}: {field} is {value}, expected {expected}")]
    InvalidField { id: u64, field: &'static str, value: String, expected: String },

    /// An option of a graph construction (such as a training step's) or the graph as a whole is
    /// out of range, with no one node to blame.
    #[error("{what} is {value}, expected {expected}")]
    InvalidOption { what: &'static str, value: String, expected: String },

    /// The graph has more nodes than the analyses can hold in memory.
    #[error("the graph has more than {limit} nodes, the most this build handles: the analyses keep a bit per pair of tasks for each relation (V²/8 bytes, {limit_gb:.2} GB at the limit)")]
    TooLarge { limit: usize, limit_gb: f64 },

    /// An input file is larger than any valid task graph or record this build reads.
    #[error("{path}: larger than {limit_mib} MiB, the most an input file may be (a task graph of the maximum size is far smaller)")]
    FileTooLarge { path: String, limit_mib: u64 },

    /// A synthetic-graph specification could not be parsed.
    #[error("invalid synthetic graph `{spec}`: {reason}")]
    InvalidSpec { spec: String, reason: String },

    /// A node index passed to an API is out of range (a programming error in the caller, reported
    /// instead of panicking).
    #[error("node index {index} out of range for a graph of {len} nodes")]
    IndexOutOfRange { index: usize, len: usize },

    /// Reading or writing a file failed.
    /// The I/O error is part of the message rather than a `source`, so printing the error
    /// chain does not repeat it.
    #[error("{path}: {error}")]
    Io { path: String, error: std::io::Error },
}

fn format_cycle(cycle: &[u64]) -> String {
    cycle.iter().map(u64::to_string).collect::<Vec<_>>().join(" -> ")
}

/// The result type of `nimble-graph`.
pub type Result<T, E = GraphError> = std::result::Result<T, E>;
