//! Every registered algorithm's plans verify; Nimble's keep the paper's guarantees; the checker
//! catches broken plans; Hopcroft–Karp agrees with petgraph.

use nimble_graph::matching::hopcroft_karp;
use nimble_graph::{Node, SyntheticSpec, TaskGraph, TaskGraphBuilder};
use nimble_sched::algorithms::{self, chain_decomposition, ALGORITHMS};
use nimble_sched::{verified, verify, Analysis, RegionPlan, SchedError, StreamPlan, Violation};
use petgraph::graph::UnGraph;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

/// Every registered algorithm, with an argument where it takes one.
fn all_algorithms() -> Vec<String> {
    ALGORITHMS.iter().map(|a| if a.usage.contains(':') { format!("{}:3", a.name) } else { a.name.to_string() }).collect()
}

/// A graph of `n` tasks with `edges` between labels `a < b`, its nodes added in a scrambled
/// order (label `i` at index `i * 37 mod n` order, when 37 and `n` are coprime, else reversed)
/// so that index order is not a topological order and algorithms cannot lean on it.
fn build(n: usize, edges: &[(usize, usize)]) -> TaskGraph {
    let mut builder = TaskGraphBuilder::new();
    let scrambled: Vec<usize> = if n % 37 != 0 { (0..n).map(|i| (i * 37) % n).collect() } else { (0..n).rev().collect() };
    for i in scrambled {
        builder.add_node(Node::new(i as u64, "op").with_duration(1.0 + (i % 7) as f64)).unwrap();
    }
    for &(a, b) in edges {
        builder.add_edge(a as u64, b as u64).unwrap();
    }
    builder.build().unwrap()
}

fn random_dag() -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
    (1usize..60).prop_flat_map(|n| {
        let pairs = proptest::collection::vec((0..n, 0..n), 0..n * 3);
        (Just(n), pairs.prop_map(|p| p.into_iter().filter(|(a, b)| a < b).collect()))
    })
}

proptest! {
    // A failing case is shrunk and printed; it is kept under target/, never in the source tree
    // (a failing run used to leave tests/plans.proptest-regressions untracked there).
    #![proptest_config(ProptestConfig {
        cases: 200,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(concat!(env!("CARGO_MANIFEST_DIR"), "/../target/proptest-regressions/plans.txt")))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_algorithm_produces_valid_plans((n, edges) in random_dag()) {
        let graph = build(n, &edges);
        let analysis = Analysis::new(&graph);
        for name in all_algorithms() {
            let plan = algorithms::by_name(&name).unwrap().assign(&analysis);
            let report = verify(&analysis, &plan);
            prop_assert!(report.is_valid(), "{}: {:?}", name, report.violations);
            prop_assert!(report.redundant_syncs.is_empty(), "{}: redundant {:?}", name, report.redundant_syncs);
            prop_assert_eq!(plan.stream_of.iter().max().map_or(0, |s| s + 1), plan.streams);
            let regions = RegionPlan::from_plan(&graph, &plan);
            prop_assert_eq!(regions.violation(&graph, &plan), None, "{}", name);
        }
    }

    #[test]
    fn nimble_critical_holds_the_heaviest_path_on_stream_zero((n, edges) in random_dag()) {
        let graph = build(n, &edges);
        let analysis = Analysis::new(&graph);
        let plan = algorithms::by_name("nimble-critical").unwrap().assign(&analysis);
        let report = verify(&analysis, &plan);
        prop_assert!(report.max_logical_concurrency, "serializes {:?}", report.serialized_pair);
        prop_assert!(plan.streams >= analysis.width());
        let path = algorithms::heaviest_meg_path(&analysis);
        // The path: dependent, and as heavy as the graph's critical path (durations known).
        prop_assert!(path.windows(2).all(|p| analysis.reachability().reaches(p[0], p[1])));
        let weight: f64 = path.iter().map(|&v| graph.duration_or_zero(v)).sum();
        prop_assert!((weight - graph.critical_path().length_us).abs() < 1e-9, "{} vs {}", weight, graph.critical_path().length_us);
        for &v in &path {
            prop_assert_eq!(plan.stream_of[v], 0);
        }
        // No sync between consecutive path tasks: their order is the stream's.
        for pair in path.windows(2) {
            prop_assert!(!plan.syncs.contains(&(pair[0], pair[1])));
        }
    }

    #[test]
    fn nimble_keeps_the_papers_guarantees((n, edges) in random_dag()) {
        let graph = build(n, &edges);
        let analysis = Analysis::new(&graph);
        let matching = chain_decomposition(&analysis).matching_size;
        let bound = analysis.meg_edge_count() - matching;
        let width = analysis.width();
        let merged = algorithms::by_name("nimble").unwrap().assign(&analysis);
        let chains = algorithms::by_name("nimble-chains").unwrap().assign(&analysis);
        for plan in [&merged, &chains] {
            let report = verify(&analysis, plan);
            prop_assert!(report.max_logical_concurrency, "{} serializes {:?}", plan.algorithm, report.serialized_pair);
            prop_assert!(plan.syncs.len() <= bound, "{}: {} syncs > |E'| - |M| = {}", plan.algorithm, plan.syncs.len(), bound);
            prop_assert!(plan.streams >= width);
        }
        prop_assert_eq!(chains.streams, n - matching);
        prop_assert!(merged.streams <= chains.streams);
    }

    #[test]
    fn nimble_bounded_uses_at_most_k_streams_and_is_nimble_below_the_bound((n, edges) in random_dag(), k in 1usize..6) {
        let graph = build(n, &edges);
        let analysis = Analysis::new(&graph);
        let nimble = algorithms::by_name("nimble").unwrap().assign(&analysis);
        let bounded = algorithms::by_name(&format!("nimble-bounded:{k}")).unwrap().assign(&analysis);
        prop_assert!(verify(&analysis, &bounded).is_valid());
        prop_assert!(bounded.streams <= k.max(1) && bounded.streams <= nimble.streams.max(1), "{} streams for k {}", bounded.streams, k);
        if nimble.streams <= k {
            prop_assert_eq!((&bounded.stream_of, &bounded.syncs), (&nimble.stream_of, &nimble.syncs));
        }
    }

    #[test]
    fn literature_policies_keep_their_stream_bounds_and_rules((n, edges) in random_dag(), k in 1usize..6) {
        let graph = build(n, &edges);
        let analysis = Analysis::new(&graph);
        for name in ["torchsched", "trt-llm", "heft"] {
            let plan = algorithms::by_name(&format!("{name}:{k}")).unwrap().assign(&analysis);
            prop_assert!(verify(&analysis, &plan).is_valid(), "{name}:{k}");
            prop_assert!(plan.streams <= k, "{name}:{k} used {} streams", plan.streams);
        }
        // IOS: each stage's groups are independent of each other, and stages respect the graph.
        let reach = analysis.reachability();
        let stages = algorithms::ios_stages(&graph, k);
        prop_assert_eq!(stages.iter().flatten().map(Vec::len).sum::<usize>(), n);
        for stage in &stages {
            for (i, a) in stage.iter().enumerate() {
                for b in &stage[i + 1..] {
                    prop_assert!(a.iter().all(|&u| b.iter().all(|&v| !reach.reaches(u, v) && !reach.reaches(v, u))));
                }
            }
        }
        // Opara: a stream passes from a task to one of its consumers, once, so each stream's
        // tasks lie on one path of the graph.
        let opara = algorithms::by_name("opara").unwrap().assign(&analysis);
        for sequence in opara.stream_sequences() {
            prop_assert!(sequence.windows(2).all(|pair| reach.reaches(pair[0], pair[1])));
        }
    }

    #[test]
    fn hopcroft_karp_matches_petgraph((n, edges) in random_dag()) {
        // The bipartite graph of Algorithm 1: left copy u, right copy v for each edge u -> v.
        let adjacency: Vec<Vec<usize>> = (0..n)
            .map(|u| edges.iter().filter(|e| e.0 == u).map(|e| e.1).collect())
            .collect();
        let ours = hopcroft_karp(n, &nimble_graph::Adjacency::from_lists(&adjacency));
        let bipartite = UnGraph::<(), ()>::from_edges(edges.iter().map(|&(u, v)| (u as u32, (n + v) as u32)));
        let theirs = petgraph::algo::maximum_matching(&bipartite);
        prop_assert_eq!(ours.size(), theirs.edges().count());
        for (u, v) in ours.pairs() {
            prop_assert!(edges.contains(&(u, v)));
        }
    }
}

#[test]
fn fan_gets_one_stream_per_branch_and_minimal_syncs() {
    let graph = SyntheticSpec::Fan { branches: 4, depth: 3 }.generate();
    let analysis = Analysis::new(&graph);
    let plan = algorithms::by_name("nimble").unwrap().assign(&analysis);
    assert_eq!(plan.streams, 4);
    // The source shares a stream with one branch and the sink with one: 3 forks + 3 joins.
    assert_eq!(plan.syncs.len(), 6);
    let single = algorithms::by_name("single").unwrap().assign(&analysis);
    assert_eq!((single.streams, single.syncs.len()), (1, 0));
    assert!(!verify(&analysis, &single).max_logical_concurrency);
}

#[test]
fn merge_step_cuts_streams_without_losing_concurrency() {
    // Two diamonds in sequence: 0 -> {1,2} -> 3 -> {4,5} -> 6. Matching gives 3 chains, e.g.
    // 0-1-3-4-6, 2, 5; chain "2" reaches "5", so the merge leaves 2 streams (the width).
    let graph = build(7, &[(0, 1), (0, 2), (1, 3), (2, 3), (3, 4), (3, 5), (4, 6), (5, 6)]);
    let analysis = Analysis::new(&graph);
    let chains = algorithms::by_name("nimble-chains").unwrap().assign(&analysis);
    let merged = algorithms::by_name("nimble").unwrap().assign(&analysis);
    assert_eq!((chains.streams, merged.streams, analysis.width()), (3, 2, 2));
    assert!(verify(&analysis, &merged).max_logical_concurrency);
}

#[test]
fn transitive_parents_get_no_syncs() {
    // A chain 0 -> 1 -> 2 -> 5, and nodes 3 and 4 that each read 0, 1 and 2. Only one of
    // {3, 4, 5} can follow 2 on its stream; each of the others has three cross-stream parents
    // but needs one wait (on 2), which implies 0 and 1. The reference code waited on all three.
    let graph = build(6, &[(0, 1), (1, 2), (2, 5), (0, 3), (1, 3), (2, 3), (0, 4), (1, 4), (2, 4)]);
    let analysis = Analysis::new(&graph);
    let plan = algorithms::by_name("nimble").unwrap().assign(&analysis);
    let report = verify(&analysis, &plan);
    assert!(report.is_valid() && report.redundant_syncs.is_empty());
    let cross_stream_parents = graph.edges().filter(|&(u, v)| plan.stream_of[u] != plan.stream_of[v]).count();
    assert_eq!(plan.syncs.len(), 2);
    assert!(cross_stream_parents >= 4, "{cross_stream_parents} cross-stream parent edges");
    assert!(plan.syncs.iter().all(|&(u, _)| u == 2));
}

#[test]
fn checker_catches_broken_plans() {
    let graph = SyntheticSpec::Fan { branches: 3, depth: 2 }.generate();
    let analysis = Analysis::new(&graph);
    let good = algorithms::by_name("nimble").unwrap().assign(&analysis);
    assert!(verify(&analysis, &good).is_valid());

    let mut missing = good.clone();
    missing.syncs.pop();
    assert!(verify(&analysis, &missing).violations.iter().any(|v| matches!(v, Violation::UnenforcedDependency { .. })));
    // As an error, naming the algorithm and the first violation; a valid plan passes.
    let message = verified(&analysis, &missing).unwrap_err().to_string();
    assert!(message.starts_with("algorithm nimble produced an invalid plan: ") && message.contains(&verify(&analysis, &missing).violations[0].describe(&graph)), "{message}");
    assert!(verified(&analysis, &good).is_ok());

    let mut backwards = good.clone();
    let (u, v) = backwards.syncs[0];
    backwards.syncs[0] = (v, u);
    let violations = verify(&analysis, &backwards).violations;
    assert!(violations.contains(&Violation::SyncBeforeRecord { from: v, to: u }), "{violations:?}");

    let mut reordered = good.clone();
    reordered.order.reverse();
    assert!(verify(&analysis, &reordered).violations.iter().any(|v| matches!(v, Violation::OrderNotTopological { .. })));

    let mut short = good.clone();
    short.stream_of.pop();
    assert!(matches!(verify(&analysis, &short).violations[0], Violation::Malformed(_)));

    let mut out_of_range = good.clone();
    out_of_range.stream_of[0] = 99;
    assert_eq!(verify(&analysis, &out_of_range).violations, vec![Violation::StreamOutOfRange { node: 0, stream: 99 }]);

    let mut redundant = good.clone();
    let sink = graph.len() - 1;
    let source_stream_sync = (0, sink);
    redundant.syncs.push(source_stream_sync);
    let report = verify(&analysis, &redundant);
    assert!(report.is_valid());
    assert!(report.redundant_syncs.contains(&source_stream_sync), "{:?}", report.redundant_syncs);
}

#[test]
fn registry_errors_name_the_problem() {
    let unknown = algorithms::by_name("nimbel").err().unwrap();
    assert!(matches!(unknown, SchedError::UnknownAlgorithm { .. }));
    assert!(unknown.to_string().contains("nimble, nimble-chains, single, round-robin:K"));
    for bad in ["round-robin:0", "round-robin:x", "nimble:2", "single:"] {
        assert!(matches!(algorithms::by_name(bad).err().unwrap(), SchedError::InvalidArgument { .. }), "{bad}");
    }
    assert_eq!(algorithms::by_name("round-robin").unwrap().name(), "round-robin:4");
    for info in ALGORITHMS {
        let name = if info.usage.contains(':') { format!("{}:2", info.name) } else { info.name.to_string() };
        assert_eq!(algorithms::by_name(&name).unwrap().name(), name);
    }
}

#[test]
fn plan_json_uses_user_ids() {
    let graph = TaskGraph::from_json_str(r#"{"nodes":[{"id":40,"op":"a"},{"id":7,"op":"b"},{"id":9,"op":"c"}],"edges":[[40,7],[40,9]]}"#).unwrap();
    let analysis = Analysis::new(&graph);
    let plan = algorithms::by_name("nimble").unwrap().assign(&analysis);
    let json = plan.to_json(&analysis);
    assert_eq!(json["order"], serde_json::json!([40, 7, 9]));
    assert_eq!(json["streams"], 2);
    assert_eq!(json["stream_of"]["40"], json["stream_of"]["7"]);
    assert_eq!(json["sync_edges"], serde_json::json!([[40, 9]]));
    // A broken plan's error names the graph's ids (40 and 9), not its indices (0 and 2).
    let mut broken = plan.clone();
    broken.syncs.clear();
    let message = verified(&analysis, &broken).unwrap_err().to_string();
    assert!(message.ends_with("dependency id 40 -> id 9 is not enforced by stream order or syncs"), "{message}");
}

#[test]
fn assignments_with_sparse_labels_are_renumbered() {
    let graph = build(3, &[(0, 1)]);
    let analysis = Analysis::new(&graph);
    let plan = StreamPlan::from_assignment(&analysis, "custom", &[17, 17, 5], None);
    assert_eq!((plan.streams, plan.stream_of.clone()), (2, vec![0, 0, 1]));
}

/// A badly written assigner (a researcher's first try) gets an error naming it from `verified`,
/// which every caller runs, not a panic inside `StreamPlan::from_assignment`.
#[test]
fn a_broken_assigner_is_an_error_naming_it() {
    struct Broken {
        labels_short: bool,
    }
    use nimble_sched::StreamAssigner;
    impl StreamAssigner for Broken {
        fn name(&self) -> String {
            if self.labels_short { "short-labels" } else { "reversed-order" }.to_string()
        }
        fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
            let n = analysis.graph().len();
            if self.labels_short {
                StreamPlan::from_assignment(analysis, self.name(), &vec![0; n - 1], None)
            } else {
                let mut order = analysis.graph().topological_order().to_vec();
                order.reverse();
                StreamPlan::from_assignment(analysis, self.name(), &vec![0; n], Some(order))
            }
        }
    }
    let graph = SyntheticSpec::Fan { branches: 3, depth: 2 }.generate();
    let analysis = Analysis::new(&graph);
    for (labels_short, expected) in [(true, "stream_of has 7 entries for 8 nodes"), (false, "issue order puts node")] {
        let assigner = Broken { labels_short };
        let error = verified(&analysis, &assigner.assign(&analysis)).unwrap_err();
        let message = error.to_string();
        assert!(message.contains(&assigner.name()) && message.contains(expected), "{message}");
    }
}

#[test]
fn nimble_critical_weighs_tasks_by_duration_and_else_counts_them() {
    let fork = |heavy: Option<f64>| {
        let mut builder = TaskGraphBuilder::new();
        for i in 0..6u64 {
            let node = Node::new(i, "op");
            builder.add_node(match heavy { Some(d) if i == 4 => node.with_duration(d), Some(_) => node.with_duration(1.0), None => node }).unwrap();
        }
        // 0 -> 1 -> 2 -> 3 -> 5 and 0 -> 4 -> 5.
        for (a, b) in [(0, 1), (1, 2), (2, 3), (3, 5), (0, 4), (4, 5)] {
            builder.add_edge(a, b).unwrap();
        }
        builder.build().unwrap()
    };
    for (heavy, path) in [(None, vec![0, 1, 2, 3, 5]), (Some(100.0), vec![0, 4, 5])] {
        let graph = fork(heavy);
        let analysis = Analysis::new(&graph);
        let index = |id: u64| graph.index_of(id).unwrap();
        let expected: Vec<usize> = path.iter().map(|&id| index(id)).collect();
        assert_eq!(algorithms::heaviest_meg_path(&analysis), expected, "{heavy:?}");
        let plan = algorithms::by_name("nimble-critical").unwrap().assign(&analysis);
        assert!(expected.iter().all(|&v| plan.stream_of[v] == 0), "{heavy:?}: {:?}", plan.stream_of);
        assert_eq!(plan.streams, 2);
    }
}

/// IOS's stage barrier is the simulator's graph-launch dependency latency.
#[test]
fn ios_barrier_is_the_simulators_dependency_latency() {
    assert_eq!(algorithms::IOS_STAGE_BARRIER_US, nimble_sched::SimulatorConfig::graph().graph_dependency_latency_us);
}
