//! The registered stream-assignment algorithms.
//!
//! Adding an algorithm: write `src/algorithms/NAME.rs` with a type implementing
//! [`StreamAssigner`](crate::StreamAssigner), declare the module below, and add one
//! [`AlgorithmInfo`] line to [`ALGORITHMS`]. The CLI, the experiments and the property tests
//! (every registered algorithm's plans must verify) pick it up from there.

mod bounded;
mod critical;
mod greedy;
mod heft;
mod ios;
mod level;
mod nimble;
mod opara;
mod round_robin;
mod single;
#[cfg(feature = "test-policies")]
mod throwaway;
mod torchsched;
mod trt_llm;
mod weights;

pub use bounded::NimbleBounded;
pub use critical::{heaviest_meg_path, NimbleCritical};
pub use greedy::Greedy;
pub use heft::Heft;
pub use ios::{stages as ios_stages, Ios, MAX_WINDOW as IOS_MAX_WINDOW, STAGE_BARRIER_US as IOS_STAGE_BARRIER_US};
pub use level::Level;
pub use nimble::{chain_decomposition, merge_chains, Chains, Nimble};
pub use opara::{compute_bound, Opara};
pub use round_robin::RoundRobin;
pub use single::Single;
pub use torchsched::Torchsched;
pub use trt_llm::TrtLlm;

use crate::error::{Result, SchedError};
use crate::StreamAssigner;

/// One registry entry.
pub struct AlgorithmInfo {
    /// Name used to select it (before any `:ARGUMENT`).
    pub name: &'static str,
    /// How to write it with its argument, e.g. `round-robin:K`.
    pub usage: &'static str,
    /// One line for `nimble-bench algos`.
    pub summary: &'static str,
    /// Builds an instance from the text after the colon, if any.
    pub build: fn(Option<&str>) -> Result<Box<dyn StreamAssigner>>,
}

/// Every registered algorithm, in the order `algos` lists them.
pub const ALGORITHMS: &[AlgorithmInfo] = &[
    AlgorithmInfo {
        name: "nimble",
        usage: "nimble",
        summary: "Nimble (NeurIPS'20): MEG + max bipartite matching into chains, chains merged onto streams; max concurrency, fewest syncs",
        build: |argument| no_argument("nimble", argument, Box::new(Nimble { merge_chains: true })),
    },
    AlgorithmInfo {
        name: "nimble-chains",
        usage: "nimble-chains",
        summary: "Nimble's Algorithm 1 as printed: one stream per matching chain, no merge step",
        build: |argument| no_argument("nimble-chains", argument, Box::new(Nimble { merge_chains: false })),
    },
    AlgorithmInfo {
        name: "single",
        usage: "single",
        summary: "everything on one stream (plain single-stream CUDA-graph capture)",
        build: |argument| no_argument("single", argument, Box::new(Single)),
    },
    AlgorithmInfo {
        name: "round-robin",
        usage: "round-robin:K",
        summary: "i-th task in topological order on stream i mod K (K defaults to 4)",
        build: |argument| Ok(Box::new(RoundRobin { streams: stream_count("round-robin", argument, 4)? })),
    },
    AlgorithmInfo {
        name: "level",
        usage: "level",
        summary: "wavefront: the i-th task of each DAG level on stream i",
        build: |argument| no_argument("level", argument, Box::new(Level)),
    },
    AlgorithmInfo {
        name: "greedy",
        usage: "greedy",
        summary: "Opara-style: inherit the first input's stream if its first consumer, else a new stream",
        build: |argument| no_argument("greedy", argument, Box::new(Greedy)),
    },
    AlgorithmInfo {
        name: "nimble-critical",
        usage: "nimble-critical",
        summary: "Nimble's chains with the heaviest path (by duration_us, else by tasks) matched first, alone on stream 0",
        build: |argument| no_argument("nimble-critical", argument, Box::new(NimbleCritical)),
    },
    AlgorithmInfo {
        name: "nimble-bounded",
        usage: "nimble-bounded:K",
        summary: "Nimble's plan folded onto at most K streams (K defaults to 8, CUDA's hardware queues), streams busy at different times sharing one",
        build: |argument| Ok(Box::new(NimbleBounded { streams: stream_count("nimble-bounded", argument, 8)? })),
    },
    AlgorithmInfo {
        name: "opara",
        usage: "opara",
        summary: "Opara (TPDS'24): first producer's stream not yet taken, else a new one; launches alternate compute- and memory-bound",
        build: |argument| no_argument("opara", argument, Box::new(Opara)),
    },
    AlgorithmInfo {
        name: "torchsched",
        usage: "torchsched:K",
        summary: "apex torchsched: the deepest path on the default stream, the rest round-robin over K-1 side streams (K defaults to 8)",
        build: |argument| Ok(Box::new(Torchsched { streams: stream_count("torchsched", argument, 8)? })),
    },
    AlgorithmInfo {
        name: "trt-llm",
        usage: "trt-llm:K",
        summary: "TensorRT-LLM auto multi-stream: farthest from the exit first, onto an idle or the earliest-free of K streams (K defaults to 3)",
        build: |argument| Ok(Box::new(TrtLlm { streams: stream_count("trt-llm", argument, 3)? })),
    },
    AlgorithmInfo {
        name: "heft",
        usage: "heft:K",
        summary: "HEFT (TPDS'02): upward rank, earliest finish with insertion into idle gaps, on K streams (K defaults to 4)",
        build: |argument| Ok(Box::new(Heft { streams: stream_count("heft", argument, 4)? })),
    },
    AlgorithmInfo {
        name: "ios",
        usage: "ios:K",
        summary: "IOS (MLSys'21): stages chosen by dynamic program over windows of K tasks (K defaults to 12, at most 16)",
        build: |argument| Ok(Box::new(Ios { window: window_size(argument)? })),
    },
    #[cfg(feature = "test-policies")]
    AlgorithmInfo {
        name: "throwaway",
        usage: "throwaway",
        summary: "test build only: tasks alternate between two streams in topological order",
        build: |argument| no_argument("throwaway", argument, Box::new(throwaway::Throwaway { broken: false })),
    },
    #[cfg(feature = "test-policies")]
    AlgorithmInfo {
        name: "throwaway-broken",
        usage: "throwaway-broken",
        summary: "test build only: `throwaway` with its last sync dropped (an invalid plan)",
        build: |argument| no_argument("throwaway-broken", argument, Box::new(throwaway::Throwaway { broken: true })),
    },
];

/// The window `ios` takes as its argument: 1 to [`IOS_MAX_WINDOW`] tasks, 12 without one.
fn window_size(argument: Option<&str>) -> Result<usize> {
    match argument {
        None => Ok(12),
        Some(text) => text.parse().ok().filter(|k: &usize| (1..=IOS_MAX_WINDOW).contains(k)).ok_or_else(|| SchedError::InvalidArgument {
            algorithm: "ios".into(),
            argument: text.into(),
            expected: format!("a window of 1 to {IOS_MAX_WINDOW} tasks, as in ios:12"),
        }),
    }
}

/// The stream count an algorithm takes as its argument (`default` without one).
fn stream_count(algorithm: &str, argument: Option<&str>, default: usize) -> Result<usize> {
    match argument {
        None => Ok(default),
        Some(text) => text.parse().ok().filter(|&k: &usize| k >= 1).ok_or_else(|| SchedError::InvalidArgument {
            algorithm: algorithm.into(),
            argument: text.into(),
            expected: format!("a stream count of at least 1, as in {algorithm}:4"),
        }),
    }
}

fn no_argument(
    algorithm: &str,
    argument: Option<&str>,
    assigner: Box<dyn StreamAssigner>,
) -> Result<Box<dyn StreamAssigner>> {
    match argument {
        None => Ok(assigner),
        Some(text) => Err(SchedError::InvalidArgument {
            algorithm: algorithm.into(),
            argument: text.into(),
            expected: "no argument".into(),
        }),
    }
}

/// Builds the algorithm named by `spec` (`nimble`, `round-robin:8`, …).
///
/// # Errors
/// [`SchedError::UnknownAlgorithm`] listing the registered names, or
/// [`SchedError::InvalidArgument`].
pub fn by_name(spec: &str) -> Result<Box<dyn StreamAssigner>> {
    let (name, argument) = match spec.split_once(':') {
        Some((name, argument)) => (name, Some(argument)),
        None => (spec, None),
    };
    let info = ALGORITHMS.iter().find(|a| a.name == name).ok_or_else(|| SchedError::UnknownAlgorithm {
        name: spec.into(),
        known: ALGORITHMS.iter().map(|a| a.usage).collect::<Vec<_>>().join(", "),
    })?;
    (info.build)(argument)
}
