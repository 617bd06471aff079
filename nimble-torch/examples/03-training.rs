//! Training through Nimble: on a GPU the whole step (forward, cross-entropy, backward, SGD) as
//! one CUDA graph on Nimble's streams, stepped a few times; on any device the step's task graph
//! (backward nodes mirroring the forward, the optimizer), planned and simulated.
//!
//! `cargo run --release -p nimble-torch --example 03-training`

use nimble_graph::step::{training_step, StepOptions};
use nimble_sched::{algorithms, simulate, Analysis, LaunchMode, SimulatorConfig};
use nimble_torch::{Nimble, NimbleError, Optimizer, PrepareOptions, TrainStep};
use tch::{nn, nn::ModuleT, Device, Kind, Tensor};

fn main() -> Result<(), NimbleError> {
    let device = if tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Cpu };
    let vs = nn::VarStore::new(device);
    let root = vs.root();
    let net = nn::seq_t().add(nn::conv2d(&root / "c1", 3, 16, 3, nn::ConvConfig { padding: 1, ..Default::default() })).add_fn(|x| x.relu().adaptive_avg_pool2d([1, 1]).flatten(1, -1)).add(nn::linear(&root / "fc", 16, 10, Default::default()));
    let mut nimble = Nimble::new(nn::func_t(move |x, train| net.forward_t(x, train)));
    let x = Tensor::randn([8, 3, 16, 16], (Kind::Float, device));
    let y = Tensor::randint(10, [8], (Kind::Int64, device));

    let forward = nimble.training_trace(&[x.shallow_clone()])?.task_graph()?;
    let step = training_step(&forward, &StepOptions::single_gpu()).expect("a forward with its parameters");
    let graph = step.graph.with_durations(|_, node| node.duration_us.or(Some(5.0)));
    let plan = algorithms::by_name("nimble")?.assign(&Analysis::new(&graph));
    let simulated = simulate(&graph, &plan, &SimulatorConfig::for_graph(LaunchMode::Graph, &graph)).makespan_us;
    println!("training step: {} tasks ({} in the forward), {} streams, simulated {simulated:.0} µs at 5 µs a task", graph.len(), forward.len(), plan.streams);

    if device == Device::Cpu {
        println!("no CUDA GPU: stopping before prepare_train_step (it captures a CUDA graph)");
        return Ok(());
    }
    nimble.prepare_train_step(&[x.shallow_clone()], &y, PrepareOptions::training(), TrainStep::new(Optimizer::sgd(0.05)))?;
    for step in 0..5 {
        let loss = nimble.train_step(&[x.shallow_clone()], &y)?;
        println!("step {step}: loss {:.4}", loss.double_value(&[]));
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
