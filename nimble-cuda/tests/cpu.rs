//! What needs no driver: the probe's error path, plan-to-launch translation, graph structure.

use nimble_cuda::{launch_sequence, CudaError, Gpu, GraphStructure, LaunchStep};
use nimble_graph::SyntheticSpec;
use nimble_sched::{algorithms, Analysis, StreamPlan};

#[test]
fn without_a_driver_every_entry_point_says_no_gpu() {
    if Gpu::probe().is_ok() {
        eprintln!("notice: a CUDA driver is present; the no-GPU path is not exercised here");
        return;
    }
    let error = Gpu::open(0).err().expect("opening must fail without a GPU");
    assert!(matches!(error, CudaError::NoGpu(_)), "{error}");
    assert!(error.to_string().starts_with("no CUDA GPU available: "), "{error}");
}

#[test]
fn launch_sequence_follows_the_plan() {
    let graph = SyntheticSpec::Fan { branches: 2, depth: 1 }.generate(); // 0 -> {1, 2} -> 3
    let plan = algorithms::by_name("nimble").unwrap().assign(&Analysis::new(&graph));
    assert_eq!(plan.stream_of, vec![0, 0, 1, 0]);
    use LaunchStep::*;
    assert_eq!(
        launch_sequence(&plan).unwrap(),
        vec![
            Fork,
            Kernel { node: 0, stream: 0 },
            Record { node: 0, stream: 0 },
            Kernel { node: 1, stream: 0 },
            Wait { after: 0, stream: 1 },
            Kernel { node: 2, stream: 1 },
            Record { node: 2, stream: 1 },
            Wait { after: 2, stream: 0 },
            Kernel { node: 3, stream: 0 },
            Join,
        ]
    );
}

#[test]
fn every_kernel_appears_once_and_every_wait_follows_its_record() {
    let graph = SyntheticSpec::Layered { nodes: 300, seed: 2 }.generate();
    let analysis = Analysis::new(&graph);
    for name in ["nimble", "greedy", "level", "round-robin:3", "single"] {
        let plan = algorithms::by_name(name).unwrap().assign(&analysis);
        let steps = launch_sequence(&plan).unwrap();
        let mut launched = vec![0; graph.len()];
        let mut recorded = vec![false; graph.len()];
        for step in &steps {
            match *step {
                LaunchStep::Kernel { node, stream } => {
                    launched[node] += 1;
                    assert_eq!(stream, plan.stream_of[node]);
                }
                LaunchStep::Record { node, .. } => recorded[node] = true,
                LaunchStep::Wait { after, .. } => assert!(recorded[after], "{name}: wait before record"),
                _ => {}
            }
        }
        assert!(launched.iter().all(|&c| c == 1), "{name}");
        assert_eq!(steps.iter().filter(|s| matches!(s, LaunchStep::Wait { .. })).count(), plan.syncs.len());
    }
}

#[test]
fn malformed_plans_are_rejected() {
    let graph = SyntheticSpec::Chain { nodes: 3 }.generate();
    let good = algorithms::by_name("single").unwrap().assign(&Analysis::new(&graph));
    let cases: Vec<(StreamPlan, &str)> = vec![
        (StreamPlan { syncs: vec![(2, 0)], ..good.clone() }, "does not go forward"),
        (StreamPlan { order: vec![0, 0, 1], ..good.clone() }, "not a permutation"),
        (StreamPlan { stream_of: vec![0, 0, 5], ..good.clone() }, "beyond the plan"),
        (StreamPlan { stream_of: vec![0], ..good.clone() }, "stream labels"),
    ];
    for (plan, expected) in cases {
        let error = launch_sequence(&plan).unwrap_err();
        assert!(error.contains(expected), "{error}");
    }
}

#[test]
fn graph_structure_counts_and_width() {
    let structure = GraphStructure {
        node_types: vec!["kernel".into(), "kernel".into(), "kernel".into(), "empty".into()],
        edges: vec![(0, 1), (0, 2), (1, 3), (2, 3)],
    };
    assert_eq!(structure.kernel_count(), 3);
    assert_eq!(structure.counts_by_type()["empty"], 1);
    assert_eq!(structure.width(), 2);
}
