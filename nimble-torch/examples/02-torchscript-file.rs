//! Any TorchScript file through Nimble (what `torch.jit.save` writes, or `nimble-bench infer
//! --torchscript` takes): here one this example writes from a tch model, then loads, traces and
//! plans on any device, and prepares and checks on a GPU.
//!
//! `cargo run --release -p nimble-torch --example 02-torchscript-file [FILE.pt 1x3x224x224]`

use nimble_sched::{algorithms, Analysis};
use nimble_torch::{Nimble, NimbleError, PrepareOptions};
use tch::{nn, Device, Kind, Tensor};

fn main() -> Result<(), NimbleError> {
    let device = if tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Cpu };
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let (path, shape) = match arguments.as_slice() {
        [file, shape] => (std::path::PathBuf::from(file), shape.split('x').map(|d| d.parse().expect("a shape like 1x3x224x224")).collect::<Vec<i64>>()),
        _ => {
            // Write one: two branches from one input, on the CPU, parameters frozen.
            let mut vs = nn::VarStore::new(Device::Cpu);
            let (a, b) = (nn::conv2d(vs.root() / "a", 3, 8, 3, Default::default()), nn::conv2d(vs.root() / "b", 3, 8, 3, Default::default()));
            vs.freeze();
            let model = Nimble::new(nn::func_t(move |x, _| x.apply(&a).relu() + x.apply(&b).sigmoid()));
            let path = std::env::temp_dir().join(format!("nimble-example-{}.pt", std::process::id()));
            model.export_torchscript(&[Tensor::randn([1, 3, 16, 16], (Kind::Float, Device::Cpu))], &path)?;
            (path, vec![1, 3, 16, 16])
        }
    };
    let mut nimble = Nimble::from_torchscript(&path, device)?;
    let x = Tensor::randn(shape.as_slice(), (Kind::Float, device));
    let graph = nimble.trace(&[x.shallow_clone()], false)?.task_graph()?;
    let plan = algorithms::by_name("nimble")?.assign(&Analysis::new(&graph));
    println!("{}: {} tasks; nimble plans {} streams with {} syncs", path.display(), graph.len(), plan.streams, plan.syncs.len());
    if device == Device::Cuda(0) {
        let streams = nimble.prepare(&[x.shallow_clone()], PrepareOptions::inference())?.streams;
        let (got, expected) = (nimble.forward(&[x.shallow_clone()])?, nimble.eager(&[x])?);
        println!("prepared on {} streams; largest difference from eager {:.2e}", streams, (&got[0] - &expected[0]).abs().max().double_value(&[]));
    } else {
        println!("no CUDA GPU: stopping before prepare (it captures a CUDA graph)");
    }
    if arguments.is_empty() {
        std::fs::remove_file(&path).ok();
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
