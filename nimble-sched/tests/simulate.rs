//! The simulator against closed-form timings of small plans.

use nimble_graph::{Node, SyntheticSpec, TaskGraph, TaskGraphBuilder};
use nimble_sched::{algorithms, simulate, Analysis, SimulatorConfig, StreamPlan};

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn plan(graph: &TaskGraph, algorithm: &str) -> StreamPlan {
    algorithms::by_name(algorithm).unwrap().assign(&Analysis::new(graph))
}

/// No launch or dispatch costs: only durations and dependency latency remain.
fn ideal() -> SimulatorConfig {
    SimulatorConfig { graph_launch_us: 0.0, graph_branch_us: 0.0, dispatch_us: 0.0, graph_dependency_latency_us: 0.0, ..SimulatorConfig::graph() }
}

#[test]
fn chain_in_graph_mode_is_launch_plus_durations_plus_latencies() {
    let graph = SyntheticSpec::Chain { nodes: 10 }.generate();
    let total: f64 = graph.nodes().iter().map(|n| n.duration_us.unwrap()).sum();
    let config = SimulatorConfig::graph();
    let result = simulate(&graph, &plan(&graph, "single"), &config);
    let expected = config.graph_launch_us + config.graph_branch_us + total + 9.0 * config.graph_dependency_latency_us;
    assert!(close(result.makespan_us, expected), "{} vs {expected}", result.makespan_us);
    assert!(close(result.busy_us, total));
}

#[test]
fn eager_chain_of_tiny_kernels_is_bound_by_host_launches() {
    let graph = SyntheticSpec::Chain { nodes: 100 }.generate().with_durations(|_, _| Some(0.5));
    let config = SimulatorConfig { eager_event_us: 0.0, ..SimulatorConfig::eager() };
    let result = simulate(&graph, &plan(&graph, "single"), &config);
    assert!(close(result.host_end_us, 100.0 * config.eager_launch_us));
    assert!(close(result.makespan_us, 100.0 * config.eager_launch_us + 0.5));
    let graphed = simulate(&graph, &plan(&graph, "single"), &SimulatorConfig::graph());
    assert!(graphed.makespan_us < result.makespan_us / 2.0);
}

#[test]
fn eager_mode_pays_for_fork_join_and_sync_events() {
    // fan:4:1 under nimble: 4 streams, 3 fork syncs and 3 join syncs. Host event calls: the
    // fork (one record, 4 waits), the 6 sync waits, one record per distinct sync source, and the
    // join (a record and a wait per stream).
    let graph = SyntheticSpec::Fan { branches: 4, depth: 1 }.generate().with_durations(|_, _| Some(0.0));
    let plan = plan(&graph, "nimble");
    assert_eq!((plan.streams, plan.syncs.len()), (4, 6));
    let sources = plan.syncs.iter().map(|s| s.0).collect::<std::collections::HashSet<_>>().len() as f64;
    let base = SimulatorConfig { eager_event_us: 0.0, ..SimulatorConfig::eager() };
    let priced = SimulatorConfig { eager_event_us: 1.0, ..SimulatorConfig::eager() };
    let extra = simulate(&graph, &plan, &priced).host_end_us - simulate(&graph, &plan, &base).host_end_us;
    assert!(close(extra, 5.0 + 6.0 + sources + 8.0), "{extra}");
}

#[test]
fn eager_sync_edges_use_their_own_latency() {
    let graph = SyntheticSpec::Fan { branches: 2, depth: 1 }.generate().with_durations(|_, _| Some(0.0));
    let plan = plan(&graph, "nimble"); // 0 -> 1 on stream 0, 0 -> 2 -> 3 through syncs
    let quiet = SimulatorConfig { eager_launch_us: 0.0, eager_event_us: 0.0, dispatch_us: 0.0, eager_dependency_latency_us: 0.0, eager_sync_latency_us: 0.0, ..SimulatorConfig::eager() };
    let slow_syncs = SimulatorConfig { eager_sync_latency_us: 5.0, ..quiet.clone() };
    assert!(close(simulate(&graph, &plan, &quiet).makespan_us, 0.0));
    assert!(close(simulate(&graph, &plan, &slow_syncs).makespan_us, 10.0));
}

#[test]
fn parallel_branches_overlap_only_on_separate_streams() {
    let graph = SyntheticSpec::Fan { branches: 8, depth: 4 }.generate().with_durations(|_, _| Some(10.0));
    let single = simulate(&graph, &plan(&graph, "single"), &ideal());
    let nimble = simulate(&graph, &plan(&graph, "nimble"), &ideal());
    assert!(close(single.makespan_us, 34.0 * 10.0));
    assert!(close(nimble.makespan_us, 6.0 * 10.0), "{}", nimble.makespan_us);
    let critical = graph.critical_path().length_us;
    assert!(nimble.makespan_us >= critical);
}

#[test]
fn capacity_limits_serialize_concurrent_kernels() {
    let graph = SyntheticSpec::Fan { branches: 4, depth: 1 }.generate().with_durations(|_, _| Some(10.0));
    let nimble = plan(&graph, "nimble");
    let one_at_a_time = SimulatorConfig { max_concurrent_kernels: 1, ..ideal() };
    assert!(close(simulate(&graph, &nimble, &one_at_a_time).makespan_us, 60.0));
    let full_gpu = SimulatorConfig { default_sm_share: 1.0, ..ideal() };
    assert!(close(simulate(&graph, &nimble, &full_gpu).makespan_us, 60.0));
    let half_gpu = SimulatorConfig { default_sm_share: 0.5, ..ideal() };
    assert!(close(simulate(&graph, &nimble, &half_gpu).makespan_us, 40.0));
}

#[test]
fn per_node_sm_share_attribute_overrides_the_default() {
    let mut builder = TaskGraphBuilder::new();
    for id in 0..2 {
        let mut node = Node::new(id, "k").with_duration(10.0);
        node.attrs.insert("sm_share".into(), serde_json::json!(0.8));
        builder.add_node(node).unwrap();
    }
    let graph = builder.build().unwrap();
    let pair = plan(&graph, "nimble");
    assert_eq!(pair.streams, 2);
    // Both start at once and share the GPU: 1.6 of it asked for, each runs at 1/1.6 speed.
    let run = simulate(&graph, &pair, &ideal());
    assert!(close(run.makespan_us, 16.0), "{run:?}");
    assert!(run.spans.iter().all(|s| close(s.start_us, 0.0) && close(s.end_us, 16.0)), "{run:?}");
    // A floor on every kernel's share slows small kernels down the same way.
    let mut small = TaskGraphBuilder::new();
    for id in 0..4 {
        let mut node = Node::new(id, "k").with_duration(10.0);
        node.attrs.insert("sm_share".into(), serde_json::json!(0.01));
        small.add_node(node).unwrap();
    }
    let small = small.build().unwrap();
    let fan = plan(&small, "nimble");
    assert!(close(simulate(&small, &fan, &ideal()).makespan_us, 10.0));
    let floored = SimulatorConfig { min_sm_share: 0.5, ..ideal() };
    assert!(close(simulate(&small, &fan, &floored).makespan_us, 20.0));
}

#[test]
fn a_kernel_slows_down_only_while_it_shares_the_gpu() {
    // a (10 µs, share 1) runs alone for 5 µs, then shares with b (2 µs of work, share 1):
    // both at half speed, b ends at 9, a has 3 µs left, alone again: ends at 12.
    let mut builder = TaskGraphBuilder::new();
    builder.add_node(Node::new(0, "a").with_duration(10.0)).unwrap();
    builder.add_node(Node::new(1, "wait").with_duration(5.0)).unwrap();
    builder.add_node(Node::new(2, "b").with_duration(2.0)).unwrap();
    builder.add_edge(1, 2).unwrap();
    let graph = builder.build().unwrap();
    let plan = StreamPlan::from_assignment(&Analysis::new(&graph), "test", &[0, 1, 1], None);
    // a and b take the whole GPU; `wait` takes nothing.
    let shared = graph
        .with_updated_nodes(|i, _, attrs| {
            if i != 1 {
                attrs.insert("sm_share".into(), serde_json::json!(1.0));
            }
        })
        .unwrap();
    let run = simulate(&shared, &plan, &ideal());
    assert!(close(run.spans[2].start_us, 5.0) && close(run.spans[2].end_us, 9.0), "{run:?}");
    assert!(close(run.spans[0].end_us, 12.0), "{run:?}");
}

#[test]
fn chrome_trace_has_one_event_per_node_and_named_tracks() {
    let graph = SyntheticSpec::Nasnet { cells: 1, seed: 0 }.generate();
    let plan = plan(&graph, "nimble");
    let result = simulate(&graph, &plan, &SimulatorConfig::eager());
    let trace = result.to_chrome_trace(&graph, &plan);
    let events = trace["traceEvents"].as_array().unwrap();
    let kernels = events.iter().filter(|e| e["ph"] == "X" && e["tid"].as_u64().unwrap() < 1_000_000).count();
    let launches = events.iter().filter(|e| e["ph"] == "X" && e["tid"] == 1_000_000).count();
    assert_eq!((kernels, launches), (graph.len(), graph.len()));
    assert_eq!(events.iter().filter(|e| e["ph"] == "M").count(), plan.streams + 1);
}

#[test]
fn every_span_respects_the_plan() {
    let graph = SyntheticSpec::Layered { nodes: 400, seed: 9 }.generate();
    for algorithm in ["nimble", "greedy", "level", "round-robin:5"] {
        let plan = plan(&graph, algorithm);
        for config in [SimulatorConfig::graph(), SimulatorConfig::eager()] {
            let result = simulate(&graph, &plan, &config);
            for (u, v) in graph.edges() {
                assert!(result.spans[u].end_us <= result.spans[v].start_us + 1e-9, "{algorithm}: {u} -> {v}");
            }
        }
    }
}
