//! A new stream-assignment algorithm in one file, evaluated against Nimble's without a GPU: the
//! research loop. This one puts every task on the stream of its first predecessor in issue
//! order, or a new stream when that one is taken: a greedy "follow the producer" rule.
//!
//! `cargo run -p nimble-sched --example 02-add-an-algorithm`
//!
//! To make it a registered algorithm (in the CLI, Python and the figures), put the struct in
//! `src/algorithms/` and add one line to `ALGORITHMS` in `src/algorithms/mod.rs`.

use nimble_graph::SyntheticSpec;
use nimble_sched::algorithms;
use nimble_sched::{simulate, verified, Analysis, LaunchMode, SimulatorConfig, StreamAssigner, StreamPlan};

/// Follow the producer: a task continues the stream of its first predecessor unless a sibling
/// already continued it.
struct FollowProducer;

impl StreamAssigner for FollowProducer {
    fn name(&self) -> String {
        "follow-producer".into()
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let mut stream_of = vec![0; graph.len()];
        let mut continued = vec![false; graph.len()];
        let mut streams = 0;
        for &v in graph.topological_order() {
            stream_of[v] = match graph.predecessors(v).first() {
                Some(&u) if !continued[u] => {
                    continued[u] = true;
                    stream_of[u]
                }
                _ => {
                    streams += 1;
                    streams - 1
                }
            };
        }
        // Syncs are chosen the same way for every algorithm.
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, None)
    }
}

fn main() -> Result<(), nimble_sched::SchedError> {
    for spec in ["nasnet:6", "dnn:2000", "fan:16:4"] {
        let graph = spec.parse::<SyntheticSpec>().expect("a valid spec").generate();
        let analysis = Analysis::new(&graph);
        for plan in [FollowProducer.assign(&analysis), algorithms::by_name("nimble")?.assign(&analysis)] {
            let report = verified(&analysis, &plan)?;
            let us = simulate(&graph, &plan, &SimulatorConfig::for_graph(LaunchMode::Graph, &graph)).makespan_us;
            println!("{spec:<10} {:<16} {:>4} streams {:>5} syncs  max-concurrency {:<5}  {us:>9.1} µs", plan.algorithm, plan.streams, plan.syncs.len(), report.max_logical_concurrency);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_runs() {
        super::main().unwrap();
    }
}
