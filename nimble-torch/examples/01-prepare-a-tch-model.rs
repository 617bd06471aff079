//! A tch model through Nimble: traced into a task graph and planned on the CPU, then (on a
//! machine with a CUDA GPU) prepared as one multi-stream CUDA graph, replayed and checked
//! against eager. Without a GPU it says so and stops after the plan.
//!
//! `cargo run --release -p nimble-torch --example 01-prepare-a-tch-model`

use nimble_sched::{algorithms, Analysis};
use nimble_torch::{Nimble, NimbleError, PrepareOptions};
use tch::{nn, Device, Tensor};

/// An inception-like block: three convolution branches from one input, summed.
fn block(path: &nn::Path) -> impl nn::ModuleT {
    let branch = |name: &str, k: i64| nn::conv2d(path / name, 8, 8, k, nn::ConvConfig { padding: k / 2, ..Default::default() });
    let (a, b, c) = (branch("a", 1), branch("b", 3), branch("c", 5));
    nn::func_t(move |x, _train| x.apply(&a).relu() + x.apply(&b).tanh() + x.apply(&c).sigmoid())
}

fn main() -> Result<(), NimbleError> {
    let device = if tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Cpu };
    let vs = nn::VarStore::new(device);
    let mut nimble = Nimble::new(block(&vs.root()));
    let x = Tensor::randn([1, 8, 32, 32], (tch::Kind::Float, device));

    // On any device: the task graph and Nimble's plan for it.
    let graph = nimble.trace(&[x.shallow_clone()], false)?.task_graph()?;
    let plan = algorithms::by_name("nimble")?.assign(&Analysis::new(&graph));
    println!("{} tasks; nimble plans {} streams with {} syncs", graph.len(), plan.streams, plan.syncs.len());

    if device == Device::Cpu {
        println!("no CUDA GPU: stopping before prepare (it captures a CUDA graph)");
        return Ok(());
    }
    let report = nimble.prepare(&[x.shallow_clone()], PrepareOptions::inference().optimize(false))?;
    println!("prepared: {} streams, {} syncs", report.streams, report.syncs);
    let expected = nimble.eager(&[x.shallow_clone()])?;
    let got = nimble.forward(&[x])?;
    let error = (&got[0] - &expected[0]).abs().max().double_value(&[]);
    println!("replayed; largest difference from eager {error:.2e}");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_runs() {
        super::main().unwrap();
    }
}
