//! Plans of whole training steps with gradient all-reduces: every algorithm's plan passes the
//! checker, and Nimble keeps collectives on streams of their own, beside the backward.

use nimble_graph::step::{training_step, StepOptions, COLLECTIVE_CLASS};
use nimble_graph::{Node, SyntheticSpec, TaskGraph, TaskGraphBuilder};
use nimble_sched::algorithms::{self, ALGORITHMS};
use nimble_sched::{simulate, verify, Analysis, SimulatorConfig};
use proptest::prelude::*;
use serde_json::json;

/// A forward of `spec` whose every `every`-th node reads a parameter of `bytes`.
fn forward(spec: SyntheticSpec, every: usize, bytes: usize) -> TaskGraph {
    let graph = spec.generate();
    let mut builder = TaskGraphBuilder::new();
    let mut next = 0;
    for (v, node) in graph.nodes().iter().enumerate() {
        let mut node: Node = node.clone();
        node.duration_us = Some(5.0 + (v % 4) as f64);
        if v % every == 0 {
            node.attrs.insert("params".into(), json!([{"index": next, "bytes": bytes, "dtype": "Float"}]));
            next += 1;
        }
        builder.add_node(node).unwrap();
    }
    for (u, v) in graph.edges() {
        builder.add_edge(graph.id_of(u), graph.id_of(v)).unwrap();
    }
    builder.build().unwrap()
}

fn data_parallel(bucket: usize) -> StepOptions {
    StepOptions { buckets: Some((bucket, bucket)), backward_factor: 2.0 }
}

#[test]
fn every_algorithm_plans_a_data_parallel_step_and_the_checker_accepts_it() {
    for spec in [SyntheticSpec::Chain { nodes: 40 }, SyntheticSpec::Fan { branches: 4, depth: 6 }, "nasnet:3".parse().unwrap()] {
        let step = training_step(&forward(spec, 3, 1000), &data_parallel(2500)).unwrap();
        assert!(step.collectives.len() >= 3, "{spec:?}: {} buckets", step.collectives.len());
        let analysis = Analysis::new(&step.graph);
        for info in ALGORITHMS {
            let name = if info.usage.contains(':') { format!("{}:3", info.name) } else { info.name.to_string() };
            let plan = algorithms::by_name(&name).unwrap().assign(&analysis);
            let report = verify(&analysis, &plan);
            assert!(report.is_valid(), "{spec:?} {name}: {:?}", report.violations);
        }
    }
}

#[test]
fn nimble_puts_collectives_on_their_own_stream_where_they_overlap_the_backward() {
    let step = training_step(&forward(SyntheticSpec::Chain { nodes: 60 }, 2, 1000), &data_parallel(4000)).unwrap();
    let graph = step.graph.with_durations(|v, node| node.duration_us.or(step.collectives.contains(&v).then_some(30.0)));
    let analysis = Analysis::new(&graph);
    let plan = algorithms::by_name("nimble").unwrap().assign(&analysis);
    let comm_streams: std::collections::BTreeSet<usize> = step.collectives.iter().map(|&c| plan.stream_of[c]).collect();
    assert_eq!(comm_streams.len(), 1, "one chain of collectives, one stream");
    let comm = *comm_streams.first().unwrap();
    for v in 0..graph.len() {
        if plan.stream_of[v] == comm {
            assert_eq!(graph.node(v).attrs.get("stream_class"), Some(&json!(COLLECTIVE_CLASS)), "node {} shares the collectives' stream", graph.node(v).op);
        }
    }
    // The first bucket's all-reduce overlaps the backward nodes made after it.
    let run = simulate(&graph, &plan, &SimulatorConfig::graph());
    let first = run.spans[step.collectives[0]];
    let overlapped = run.spans.iter().any(|s| graph.node(s.node).attrs.get("phase") == Some(&json!("backward")) && s.start_us < first.end_us && s.end_us > first.start_us);
    assert!(overlapped, "bucket 0 [{}, {}] overlaps no backward node", first.start_us, first.end_us);
    // On one stream the same step is longer by the collectives' time.
    let single = algorithms::by_name("single").unwrap().assign(&analysis);
    let serial = simulate(&graph, &single, &SimulatorConfig::graph());
    assert!(serial.makespan_us > run.makespan_us + 30.0, "{} vs {}", serial.makespan_us, run.makespan_us);
}

#[test]
fn graphs_without_stream_classes_get_the_same_plans_as_before() {
    // The class filter only applies when some node has a class; tests/same_plans.rs pins the
    // digests. Here: a class on every node equal to the default changes nothing either.
    let graph = SyntheticSpec::Fan { branches: 5, depth: 4 }.generate();
    let mut builder = TaskGraphBuilder::new();
    for node in graph.nodes() {
        let mut node = node.clone();
        node.attrs.insert("stream_class".into(), json!("compute"));
        builder.add_node(node).unwrap();
    }
    for (u, v) in graph.edges() {
        builder.add_edge(graph.id_of(u), graph.id_of(v)).unwrap();
    }
    let classed = builder.build().unwrap();
    let nimble = algorithms::by_name("nimble").unwrap();
    let a = nimble.assign(&Analysis::new(&graph));
    let b = nimble.assign(&Analysis::new(&classed));
    assert_eq!((a.streams, &a.stream_of, a.syncs.len()), (b.streams, &b.stream_of, b.syncs.len()));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn nimble_never_mixes_classes_and_its_plans_verify(length in 2usize..40, every in 1usize..5, bucket in 500usize..5000) {
        let step = training_step(&forward(SyntheticSpec::Layered { nodes: length.max(2), seed: length as u64 }, every, 700), &data_parallel(bucket)).unwrap();
        let analysis = Analysis::new(&step.graph);
        for name in ["nimble", "nimble-chains"] {
            let plan = algorithms::by_name(name).unwrap().assign(&analysis);
            let report = verify(&analysis, &plan);
            prop_assert!(report.is_valid(), "{}: {:?}", name, report.violations);
            let classes = analysis.stream_classes().unwrap();
            for s in plan.stream_sequences() {
                prop_assert!(s.iter().all(|&v| classes[v] == classes[s[0]]), "{}: a stream mixes classes", name);
            }
        }
    }
}
