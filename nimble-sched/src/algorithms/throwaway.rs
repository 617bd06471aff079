//! Test build only (feature `test-policies`): a policy registered the way a researcher's new
//! one is, and a broken variant, for the CI tests that registering a policy leaves the committed
//! figures as they are and that a bad plan is one failed row.

use crate::{Analysis, StreamAssigner, StreamPlan};

/// Tasks alternate between two streams in topological order; `broken` drops the plan's last
/// sync, which leaves a dependency unenforced on any graph that needed one.
pub struct Throwaway {
    pub broken: bool,
}

impl StreamAssigner for Throwaway {
    fn name(&self) -> String {
        if self.broken { "throwaway-broken".into() } else { "throwaway".into() }
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let position = graph.topological_position();
        let stream_of: Vec<usize> = (0..graph.len()).map(|v| position[v] % 2).collect();
        let mut plan = StreamPlan::from_assignment(analysis, self.name(), &stream_of, None);
        if self.broken {
            plan.syncs.pop();
        }
        plan
    }
}
