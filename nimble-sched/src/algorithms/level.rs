//! `level`: wavefront scheduling, one DAG level spread over streams.

use crate::{Analysis, StreamAssigner, StreamPlan};

/// Tasks are grouped by level (the length of the longest path from a source); the i-th task of
/// each level, in topological order, goes to stream i.
///
/// The classic wavefront / level-synchronous scheme of data-flow executors (e.g. the
/// inter-operator parallelism of TensorFlow and TVM's graph runtime experiments): all tasks of
/// a level can run at once, but tasks of one branch land on different streams at different
/// levels, so it pays many syncs, and independent tasks of different levels may share a stream.
///
/// # Complexity
/// O(V + E) beyond the analysis, plus the sync computation.
pub struct Level;

impl StreamAssigner for Level {
    fn name(&self) -> String {
        "level".into()
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let mut level = vec![0usize; graph.len()];
        let mut used_in_level: Vec<usize> = Vec::new();
        let mut stream_of = vec![0; graph.len()];
        for &v in graph.topological_order() {
            level[v] = graph.predecessors(v).iter().map(|&u| level[u] + 1).max().unwrap_or(0);
            if used_in_level.len() <= level[v] {
                used_in_level.resize(level[v] + 1, 0);
            }
            stream_of[v] = used_in_level[level[v]];
            used_in_level[level[v]] += 1;
        }
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, None)
    }
}
