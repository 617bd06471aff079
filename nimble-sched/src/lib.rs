//! `nimble-sched`: pluggable stream assignment for task graphs.
//!
//! Depends on `nimble-graph` only: no GPU, no libtorch. A [`StreamAssigner`] turns an
//! [`Analysis`] of a `TaskGraph` into a [`StreamPlan`] (stream per task, issue order, event
//! syncs). Algorithms are looked up by name in the [registry](algorithms::by_name); [`verify`]
//! proves a plan enforces every dependency and reports its concurrency; [`simulate`] predicts
//! its makespan on a model GPU, eager or as one CUDA graph.
//!
//! ```
//! use nimble_graph::SyntheticSpec;
//! use nimble_sched::{algorithms, simulate, verify, Analysis, SimulatorConfig};
//! let graph = SyntheticSpec::Nasnet { cells: 2, seed: 0 }.generate();
//! let analysis = Analysis::new(&graph);
//! let plan = algorithms::by_name("nimble")?.assign(&analysis);
//! let report = verify(&analysis, &plan);
//! assert!(report.is_valid() && report.max_logical_concurrency);
//! let simulated = simulate(&graph, &plan, &SimulatorConfig::graph());
//! assert!(simulated.makespan_us > 0.0);
//! # Ok::<(), nimble_sched::SchedError>(())
//! ```

pub mod algorithms;
mod analysis;
mod assigner;
mod error;
mod happens_before;
mod plan;
mod regions;
pub mod simulate;
mod sparse_clocks;
mod stream_clocks;
mod verify;

pub use analysis::Analysis;
pub use assigner::StreamAssigner;
pub use error::{Result, SchedError};
pub use plan::StreamPlan;
pub use regions::{Region, RegionPlan};
pub use simulate::{simulate, LaunchMode, Simulation, SimulatorConfig};
pub use verify::{verified, verify, Verification, Violation};
