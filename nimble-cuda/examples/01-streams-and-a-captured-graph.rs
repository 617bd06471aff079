//! A plan run on a GPU with synthetic kernels (one spin kernel per task, lasting its
//! `duration_us`): issued on the plan's streams with its events, captured once as a CUDA graph
//! and replayed, then timed beside the simulator's prediction. Without a GPU it says so and
//! exits cleanly.
//!
//! `cargo run --release -p nimble-cuda --example 01-streams-and-a-captured-graph`

use nimble_cuda::{Gpu, SpinKernel, SyntheticExecutor};
use nimble_graph::SyntheticSpec;
use nimble_sched::{algorithms, simulate, Analysis, LaunchMode, SimulatorConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if let Err(why) = Gpu::probe() {
        println!("no GPU here ({why}); this example runs on a CUDA machine");
        return Ok(());
    }
    let gpu = Gpu::open(0)?;
    let kernel = SpinKernel::new(&gpu, 1)?;
    // Eight branches of four 20 µs tasks: one stream would take 640 µs.
    let graph = SyntheticSpec::Fan { branches: 8, depth: 4 }.generate().with_durations(|_, _| Some(20.0));
    for name in ["single", "nimble"] {
        let plan = algorithms::by_name(name)?.assign(&Analysis::new(&graph));
        let executor = SyntheticExecutor::new(&gpu, &kernel, &graph, &plan, 0.0)?;
        let measured = executor.measure(LaunchMode::Graph, 10, 50)?;
        let simulated = simulate(&graph, &plan, &SimulatorConfig::for_graph(LaunchMode::Graph, &graph)).makespan_us;
        println!("{name:<7} {} streams: measured {:.1} µs (median), simulated {simulated:.1} µs on {}", plan.streams, measured.median_us, gpu.info().name);
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
