//! Behaviour of the task-graph IR on user data: the JSON schema, every rejection, and the
//! analyses cross-checked against petgraph on random DAGs.

use nimble_graph::{DotOptions, GraphError, Node, SyntheticSpec, TaskGraph, TaskGraphBuilder};
use petgraph::algo::tred::dag_transitive_reduction_closure;
use petgraph::graph::DiGraph;
use proptest::prelude::*;

fn parse(text: &str) -> Result<TaskGraph, GraphError> {
    TaskGraph::from_json_str(text)
}

#[test]
fn reads_the_documented_schema_ignoring_extra_fields() {
    let graph = parse(
        r#"{"version": 3, "nodes":[
              {"id":7,"op":"aten::conv2d","duration_us":12.5,"stream_hint":"x"},
              {"id":3,"op":"aten::relu","shapes":[[1,64,56,56]],"attrs":{"sm_share":0.5}}],
            "edges":[[7,3]]}"#,
    )
    .unwrap();
    assert_eq!(graph.len(), 2);
    assert_eq!(graph.edge_count(), 1);
    assert_eq!(graph.index_of(3), Some(1));
    assert_eq!(graph.node(0).duration_us, Some(12.5));
    assert_eq!(graph.node(1).shapes, Some(vec![vec![1, 64, 56, 56]]));
    assert_eq!(graph.node(1).attrs["sm_share"], 0.5);
    assert_eq!(graph.successors(0), &[1]);
}

#[test]
fn json_round_trips_through_text_and_file() {
    let graph = SyntheticSpec::Nasnet { cells: 2, seed: 4 }.generate();
    let again = parse(&graph.to_json_string()).unwrap();
    assert_eq!(again.nodes(), graph.nodes());
    assert_eq!(again.edges().collect::<Vec<_>>(), graph.edges().collect::<Vec<_>>());

    let directory = std::env::temp_dir().join(format!("nimble-graph-test-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    let path = directory.join("g.json");
    graph.write_json(&path).unwrap();
    assert_eq!(TaskGraph::read_json(&path).unwrap().len(), graph.len());
    let leftovers = std::fs::read_dir(&directory).unwrap().count();
    assert_eq!(leftovers, 1, "the atomic write leaves no temporary file");
    std::fs::remove_dir_all(&directory).unwrap();
}

/// Each bad input and a fragment its error message must contain.
#[test]
fn rejects_bad_graphs_with_messages_naming_the_problem() {
    let cases = [
        (r#"{"nodes":[{"id":1,"op":"a"},{"id":1,"op":"b"}]}"#, "duplicate node id 1"),
        (r#"{"nodes":[{"id":1,"op":"a"}],"edges":[[1,9]]}"#, "unknown node id 9"),
        (r#"{"nodes":[{"id":1,"op":"a"}],"edges":[[1,1]]}"#, "self-edge on node 1"),
        (
            r#"{"nodes":[{"id":1,"op":"a"},{"id":2,"op":"b"},{"id":3,"op":"c"}],"edges":[[1,2],[2,3],[3,2]]}"#,
            "cycle in task graph through node",
        ),
        ("{\"nodes\":[\n  {\"id\":1,\"op\":\"a\"},\n  {\"id\":2 \"op\":\"b\"}]}", "line 3, column"),
        (r#"{"nodes":[{"id":-1,"op":"a"}]}"#, "invalid value: integer `-1`"),
        (r#"{"nodes":[{"id":1}]}"#, "missing field `op`"),
        (r#"{"edges":[]}"#, "missing field `nodes`"),
        (r#"{"nodes":[{"id":1,"op":"a"}],"edges":[[1]]}"#, "line 1"),
    ];
    for (text, expected) in cases {
        let message = parse(text).unwrap_err().to_string();
        assert!(message.contains(expected), "for {text}: got `{message}`, expected `{expected}`");
    }
}

#[test]
fn cycle_error_lists_a_real_cycle() {
    let error = parse(
        r#"{"nodes":[{"id":0,"op":"a"},{"id":1,"op":"b"},{"id":2,"op":"c"},{"id":3,"op":"d"}],
            "edges":[[0,1],[1,2],[2,3],[3,1]]}"#,
    )
    .unwrap_err();
    let GraphError::Cycle { cycle, .. } = error else { panic!("expected a cycle error, got {error}") };
    assert_eq!(cycle.first(), cycle.last());
    let edges = [(0, 1), (1, 2), (2, 3), (3, 1)];
    for pair in cycle.windows(2) {
        assert!(edges.contains(&(pair[0], pair[1])), "{cycle:?} is not a cycle");
    }
}

#[test]
fn duplicate_edges_merge_and_builder_reports_duplicate_nodes() {
    let mut builder = TaskGraphBuilder::new();
    builder.add_node(Node::new(0, "a")).unwrap();
    builder.add_node(Node::new(1, "b")).unwrap();
    assert!(matches!(builder.add_node(Node::new(1, "c")), Err(GraphError::DuplicateId { id: 1 })));
    builder.add_edge(0, 1).unwrap();
    builder.add_edge(0, 1).unwrap();
    assert_eq!(builder.build().unwrap().edge_count(), 1);
}

#[test]
fn analyses_of_a_diamond_with_a_shortcut() {
    // 0 -> 1 -> 3, 0 -> 2 -> 3, and the redundant shortcut 0 -> 3.
    let graph = parse(
        r#"{"nodes":[{"id":0,"op":"a","duration_us":1},{"id":1,"op":"b","duration_us":5},
                     {"id":2,"op":"c","duration_us":2},{"id":3,"op":"d","duration_us":1}],
            "edges":[[0,1],[0,2],[1,3],[2,3],[0,3]]}"#,
    )
    .unwrap();
    let reach = graph.reachability();
    assert!(reach.reaches(0, 3) && !reach.reaches(3, 0) && reach.independent(1, 2));
    assert_eq!(graph.transitive_reduction(&reach).to_lists(), vec![vec![1, 2], vec![3], vec![3], vec![]]);
    assert_eq!(graph.width(&reach), 2);
    let path = graph.critical_path();
    assert_eq!(path.nodes, vec![0, 1, 3]);
    assert_eq!(path.length_us, 7.0);
}

#[test]
fn widths_of_synthetic_families() {
    for (spec, width) in [("chain:50", 1), ("fan:16:3", 16), ("fan:1:1", 1)] {
        let graph: TaskGraph = spec.parse::<SyntheticSpec>().unwrap().generate();
        assert_eq!(graph.width(&graph.reachability()), width, "{spec}");
    }
}

#[test]
fn dot_colors_streams_and_marks_syncs() {
    let graph = parse(r#"{"nodes":[{"id":0,"op":"a\"q"},{"id":1,"op":"b"},{"id":2,"op":"c"}],"edges":[[0,1],[0,2]]}"#).unwrap();
    let dot = graph.to_dot(DotOptions { stream_of: Some(&[0, 0, 1]), sync_edges: &[(0, 2)], title: Some("plan") });
    assert!(dot.starts_with("digraph"));
    assert!(dot.contains(r#"a\"q"#), "quotes are escaped");
    assert!(dot.contains("n0 -> n2 [color=red"));
    assert!(dot.contains("stream 1"));
    assert_eq!(dot.matches("->").count(), 2);
}

/// Random DAGs as (node count, edges with from < to), which are acyclic by construction.
fn random_dag() -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
    (1usize..40).prop_flat_map(|n| {
        let pairs = proptest::collection::vec((0..n, 0..n), 0..n * 3);
        (Just(n), pairs.prop_map(|pairs| {
            let mut edges: Vec<(usize, usize)> = pairs.into_iter().filter(|(a, b)| a < b).collect();
            edges.sort_unstable();
            edges.dedup();
            edges
        }))
    })
}

fn build(n: usize, edges: &[(usize, usize)]) -> TaskGraph {
    let mut builder = TaskGraphBuilder::new();
    // Ids in reverse so that ids and indices differ.
    for i in 0..n {
        builder.add_node(Node::new((n - i) as u64 * 10, format!("op{i}"))).unwrap();
    }
    for &(a, b) in edges {
        builder.add_edge((n - a) as u64 * 10, (n - b) as u64 * 10).unwrap();
    }
    builder.build().unwrap()
}

proptest! {
    #[test]
    fn reduction_and_reachability_agree_with_petgraph((n, edges) in random_dag()) {
        let graph = build(n, &edges);
        let reach = graph.reachability();
        let reduced = graph.transitive_reduction(&reach);

        // petgraph wants nodes numbered in topological order; ours already are (a < b).
        let mut petgraph_graph = DiGraph::<(), ()>::from_edges(edges.iter().map(|&(a, b)| (a as u32, b as u32)));
        while petgraph_graph.node_count() < n { petgraph_graph.add_node(()); }
        let topological: Vec<_> = petgraph_graph.node_indices().collect();
        let (list, _) = petgraph::algo::tred::dag_to_toposorted_adjacency_list::<_, u32>(&petgraph_graph, &topological);
        let (petgraph_reduced, closure) = dag_transitive_reduction_closure(&list);

        let mut ours: Vec<(usize, usize)> = reduced.iter().enumerate().flat_map(|(u, vs)| vs.iter().map(move |&v| (u, v))).collect();
        let mut theirs: Vec<(usize, usize)> = petgraph_reduced.edge_indices()
            .map(|e| { let (a, b) = petgraph_reduced.edge_endpoints(e).unwrap(); (a as usize, b as usize) }).collect();
        ours.sort_unstable();
        theirs.sort_unstable();
        prop_assert_eq!(ours, theirs);
        // The one-pass version gives the same relation and the same lists, in the same order.
        let (one_pass_reach, one_pass_reduced) = graph.reachability_and_reduction();
        prop_assert_eq!(&one_pass_reduced, &reduced);
        for a in 0..n {
            for b in 0..n {
                prop_assert_eq!(reach.reaches(a, b), closure.contains_edge(a as u32, b as u32));
                prop_assert_eq!(one_pass_reach.reaches(a, b), reach.reaches(a, b));
            }
        }
    }

    #[test]
    fn width_is_a_maximum_antichain((n, edges) in random_dag()) {
        let graph = build(n, &edges);
        let reach = graph.reachability();
        let width = graph.width(&reach);
        // Exhaustive check on small graphs: no antichain is larger, and one of that size exists.
        if n <= 14 {
            let mut best = 0;
            for mask in 0u32..(1 << n) {
                let members: Vec<usize> = (0..n).filter(|i| mask >> i & 1 == 1).collect();
                let antichain = members.iter().all(|&a| members.iter().all(|&b| a == b || reach.independent(a, b)));
                if antichain { best = best.max(members.len()); }
            }
            prop_assert_eq!(width, best);
        }
        prop_assert!(width >= 1 && width <= n);
    }

    #[test]
    fn topological_order_respects_edges((n, edges) in random_dag()) {
        let graph = build(n, &edges);
        let position = graph.topological_position();
        prop_assert_eq!(graph.topological_order().len(), n);
        for (u, v) in graph.edges() { prop_assert!(position[u] < position[v]); }
    }
}

/// A random bipartite relation as bit rows over `right` columns, with a random set of allowed
/// right vertices; dense or sparse.
fn random_relation() -> impl Strategy<Value = (usize, Vec<Vec<bool>>, Vec<bool>)> {
    (1usize..40, 1usize..150, 0.02f64..0.9).prop_flat_map(|(left, right, density)| {
        (
            Just(right),
            proptest::collection::vec(proptest::collection::vec(proptest::bool::weighted(density), right), left),
            proptest::collection::vec(proptest::bool::weighted(0.7), right),
        )
    })
}

proptest! {
    /// The bit-row Hopcroft–Karp gives the very matching the list one gives (not only one of the
    /// same size): Nimble's chain merge switched to it without changing any plan.
    #[test]
    fn hopcroft_karp_on_bit_rows_is_hopcroft_karp_on_lists((right, relation, allowed) in random_relation()) {
        use nimble_graph::bitset::{BitMatrix, BitSet};
        use nimble_graph::matching::{hopcroft_karp, hopcroft_karp_rows};
        let mut rows = BitMatrix::new(relation.len(), right);
        let mut mask = BitSet::new(right);
        let lists: Vec<Vec<usize>> = relation
            .iter()
            .enumerate()
            .map(|(u, bits)| {
                for (v, &bit) in bits.iter().enumerate() {
                    if bit {
                        rows.set(u, v);
                    }
                }
                (0..right).filter(|&v| bits[v] && allowed[v]).collect()
            })
            .collect();
        for (v, &a) in allowed.iter().enumerate() {
            if a {
                mask.insert(v);
            }
        }
        let from_lists = hopcroft_karp(right, &nimble_graph::Adjacency::from_lists(&lists));
        let from_rows = hopcroft_karp_rows(relation.len(), &mask, |u| rows.row_ref(u));
        prop_assert_eq!(&from_rows.right_of, &from_lists.right_of);
    }
}
