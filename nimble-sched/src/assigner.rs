//! The `StreamAssigner` trait every scheduling algorithm implements.

use crate::analysis::Analysis;
use crate::plan::StreamPlan;

/// A stream-assignment algorithm: turns an analysed task graph into a [`StreamPlan`].
///
/// Assigners never fail on a validated graph (every `TaskGraph` is a DAG), and they never
/// execute anything: executors take the plan as data. To add one, write a file in
/// `src/algorithms/` implementing this trait and add one line to the table in
/// `src/algorithms/mod.rs`.
pub trait StreamAssigner: Send + Sync {
    /// The name the registry knows this instance by, with its argument (`round-robin:4`).
    fn name(&self) -> String;

    /// Assigns streams. Implementations usually compute a stream label per node and finish with
    /// [`StreamPlan::from_assignment`], which adds the syncs.
    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan;
}
