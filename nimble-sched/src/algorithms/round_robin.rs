//! `round-robin:K`: tasks dealt over K streams in topological order.

use crate::{Analysis, StreamAssigner, StreamPlan};

/// The i-th task in topological order goes to stream `i mod K`.
///
/// A naive baseline: it ignores the graph's structure, so it puts dependent tasks on different
/// streams (paying syncs) and independent ones on the same stream (losing concurrency).
///
/// # Complexity
/// O(V) beyond the analysis, plus the sync computation of [`StreamPlan::from_assignment`].
pub struct RoundRobin {
    /// Number of streams, at least 1.
    pub streams: usize,
}

impl StreamAssigner for RoundRobin {
    fn name(&self) -> String {
        format!("round-robin:{}", self.streams)
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let mut stream_of = vec![0; graph.len()];
        for (i, &v) in graph.topological_order().iter().enumerate() {
            stream_of[v] = i % self.streams.max(1);
        }
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, None)
    }
}
