//! Every registered stream-assignment algorithm on one graph: its plan, the checker's verdict
//! and the simulated latency, eager and as one CUDA graph. No GPU needed.
//!
//! `cargo run -p nimble-sched --example 01-assign-check-simulate`

use nimble_graph::SyntheticSpec;
use nimble_sched::algorithms::{self, ALGORITHMS};
use nimble_sched::{simulate, verified, Analysis, LaunchMode, SimulatorConfig};

fn main() -> Result<(), nimble_sched::SchedError> {
    let graph = SyntheticSpec::Nasnet { cells: 6, seed: 0 }.generate();
    let analysis = Analysis::new(&graph);
    println!("{} tasks, width {}, critical path {:.1} µs", graph.len(), analysis.width(), graph.critical_path().length_us);
    println!("{:<16} {:>7} {:>6} {:>9} {:>10} {:>10}", "algorithm", "streams", "syncs", "max-conc", "graph µs", "eager µs");
    for info in ALGORITHMS {
        let name = if info.usage.contains(':') { format!("{}:4", info.name) } else { info.name.to_string() };
        let plan = algorithms::by_name(&name)?.assign(&analysis);
        // Proves every dependency is enforced; an error names the algorithm otherwise.
        let report = verified(&analysis, &plan)?;
        let simulated = |mode| simulate(&graph, &plan, &SimulatorConfig::for_graph(mode, &graph)).makespan_us;
        println!(
            "{:<16} {:>7} {:>6} {:>9} {:>10.1} {:>10.1}",
            plan.algorithm,
            plan.streams,
            plan.syncs.len(),
            report.max_logical_concurrency,
            simulated(LaunchMode::Graph),
            simulated(LaunchMode::Eager)
        );
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
