//! The one error type of `nimble-sched`.

use thiserror::Error;

/// Why an algorithm could not be selected.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SchedError {
    /// No registered algorithm has this name.
    #[error("unknown algorithm `{name}`; registered algorithms: {known}")]
    UnknownAlgorithm { name: String, known: String },

    /// The algorithm's argument (after the colon) is missing or malformed.
    #[error("invalid argument `{argument}` for algorithm `{algorithm}`: expected {expected}")]
    InvalidArgument { algorithm: String, argument: String, expected: String },

    /// An algorithm's plan leaves a dependency unenforced or is malformed (a bug in the
    /// algorithm); the first violation found.
    #[error("algorithm {algorithm} produced an invalid plan: {violation}")]
    InvalidPlan { algorithm: String, violation: String },

    /// A simulator parameter outside its range.
    #[error("simulator parameter `{parameter}` is {value}: expected {expected}")]
    InvalidSimulatorParameter { parameter: String, value: String, expected: String },
}

/// The result type of `nimble-sched`.
pub type Result<T, E = SchedError> = std::result::Result<T, E>;
