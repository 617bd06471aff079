//! `single`: every task on one stream.

use crate::{Analysis, StreamAssigner, StreamPlan};

/// Every task on stream 0, in topological order, with no syncs: what capturing a model's
/// forward into a CUDA graph on one stream gives (Nimble's single-stream mode in the paper).
///
/// # Complexity
/// O(V) beyond the analysis.
pub struct Single;

impl StreamAssigner for Single {
    fn name(&self) -> String {
        "single".into()
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        StreamPlan::from_assignment(analysis, self.name(), &vec![0; analysis.graph().len()], None)
    }
}
