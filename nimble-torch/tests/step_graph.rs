//! The whole training step as a task graph, on the CPU: a recorded training forward knows its
//! parameters, the step around it gets backward nodes, one all-reduce per DDP bucket and the
//! optimizer, and every registered algorithm's plan of it passes the checker.

use nimble_graph::step::{training_step, StepOptions, COLLECTIVE_CLASS};
use nimble_sched::algorithms::{self, ALGORITHMS};
use nimble_sched::{verify, Analysis};
use nimble_torch::distributed::buckets;
use nimble_torch::{Nimble, NimbleError};
use serde_json::json;
use tch::{nn, Device, Kind, Tensor};

mod common;

#[test]
fn a_resnet50_training_step_has_its_buckets_and_every_plan_of_it_verifies() {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = tch::vision::resnet::resnet50(&vs.root(), 10);
    let nimble = Nimble::new(model);
    tch::manual_seed(0);
    let x = Tensor::randn([2, 3, 64, 64], (Kind::Float, Device::Cpu));
    let before = vs.variables();
    let trace = nimble.training_trace(&[x]).unwrap();
    for (name, value) in vs.variables() {
        assert!(value.equal(&before[&name]), "{name} changed: the trace must put the BatchNorm statistics back");
    }

    // 53 convolution weights, 53 BatchNorm weights and biases, the classifier's weight and bias.
    assert_eq!(trace.params.len(), 161);
    let trainable: usize = vs.trainable_variables().iter().map(|t| t.numel() * 4).sum();
    assert_eq!(trace.params.iter().map(|p| p.bytes).sum::<usize>(), trainable);
    let forward = trace.task_graph().unwrap();
    let step = training_step(&forward, &StepOptions::data_parallel()).unwrap();
    assert!(step.parameters.iter().all(|p| !p.readers.is_empty()));
    // The same buckets the data-parallel step's reducer makes from the parameters.
    let sizes: Vec<Option<(usize, &str)>> = trace.params.iter().map(|p| Some((p.bytes, p.dtype.as_str()))).collect();
    let expected = buckets(&sizes, 1 << 20, 25 << 20);
    assert_eq!(step.buckets.len(), expected.iter().flatten().max().unwrap() + 1);
    assert_eq!(step.buckets.len(), 5, "94 MiB of gradients: 1 MiB, then about 25 MiB each");
    // The last bucket holds the first layers' parameters, the stem convolution's among them.
    assert!(step.buckets.last().unwrap().0.contains(&0));

    let analysis = Analysis::new(&step.graph);
    for info in ALGORITHMS {
        let name = if info.usage.contains(':') { format!("{}:4", info.name) } else { info.name.to_string() };
        let plan = algorithms::by_name(&name).unwrap().assign(&analysis);
        let report = verify(&analysis, &plan);
        assert!(report.is_valid(), "{name}: {:?}", report.violations);
        if name == "nimble" {
            let comm = plan.stream_of[step.collectives[0]];
            assert!(step.collectives.iter().all(|&c| plan.stream_of[c] == comm));
            for v in (0..step.graph.len()).filter(|&v| plan.stream_of[v] == comm) {
                assert_eq!(step.graph.node(v).attrs.get("stream_class"), Some(&json!(COLLECTIVE_CLASS)));
            }
        }
    }
}

#[test]
fn a_forward_without_trainable_parameters_is_refused_by_name() {
    let mut vs = nn::VarStore::new(Device::Cpu);
    let net = common::net::Net::new(&vs.root(), 0.0);
    vs.freeze();
    let nimble = Nimble::new(net);
    let x = Tensor::randn([2, 3, 8, 8], (Kind::Float, Device::Cpu));
    let error = nimble.training_trace(&[x]).unwrap_err();
    assert!(matches!(error, NimbleError::InvalidInput(_)), "{error}");
    assert!(error.to_string().contains("nothing to train"), "{error}");
    // Not prepared: no step graph.
    assert!(matches!(nimble.step_graph(&StepOptions::data_parallel()), Err(NimbleError::NotPrepared)));
}
