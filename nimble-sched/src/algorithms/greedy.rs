//! `greedy`: inherit the first input's stream when first to consume it, as Opara does.

use crate::{Analysis, StreamAssigner, StreamPlan};

/// In topological order, a task inherits the stream of its first input (its first listed
/// predecessor) when it is that input's first consumer in issue order; otherwise it opens a new
/// stream.
///
/// From Opara (Chen et al., "Opara: Exploiting Operator Parallelism for Expediting DNN
/// Inference on GPUs", IEEE TPDS 2024), which launches parallel operators on streams chosen
/// this way. It follows data flow cheaply but may open many more streams than the graph's width
/// (the DESIGN notes report 28 against Nimble's 4 on GoogLeNet).
///
/// # Complexity
/// O(V + E) beyond the analysis, plus the sync computation.
pub struct Greedy;

impl StreamAssigner for Greedy {
    fn name(&self) -> String {
        "greedy".into()
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let position = graph.topological_position();
        let mut stream_of = vec![0; graph.len()];
        let mut streams = 0;
        for &v in graph.topological_order() {
            let first_input = graph.predecessors(v).first().copied();
            let inherits = first_input.filter(|&u| {
                graph.successors(u).iter().min_by_key(|&&w| position[w]) == Some(&v)
            });
            stream_of[v] = match inherits {
                Some(u) => stream_of[u],
                None => {
                    streams += 1;
                    streams - 1
                }
            };
        }
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, None)
    }
}
