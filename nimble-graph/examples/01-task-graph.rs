//! Build a task graph, look at it, write it as JSON and read it back.
//!
//! `cargo run -p nimble-graph --example 01-task-graph`

use nimble_graph::{Node, TaskGraph, TaskGraphBuilder};

fn main() -> Result<(), nimble_graph::GraphError> {
    // An inception-like block: a stem, three branches of different length, a concatenation.
    let mut builder = TaskGraphBuilder::new();
    for (id, op, us) in [(0, "aten::conv2d", 12.0), (1, "aten::conv2d", 8.0), (2, "aten::conv2d", 20.0), (3, "aten::relu", 2.0), (4, "aten::conv2d", 15.0), (5, "aten::max_pool2d", 4.0), (6, "aten::cat", 3.0)] {
        builder.add_node(Node::new(id, op).with_duration(us))?;
    }
    for (from, to) in [(0, 1), (0, 2), (2, 3), (3, 4), (0, 5), (1, 6), (4, 6), (5, 6)] {
        builder.add_edge(from, to)?;
    }
    let graph = builder.build()?;

    let path = graph.critical_path();
    println!("{} tasks, {} edges, width {}", graph.len(), graph.edge_count(), graph.width(&graph.reachability()));
    println!("critical path {:.1} µs through tasks {:?}", path.length_us, path.nodes.iter().map(|&v| graph.id_of(v)).collect::<Vec<_>>());

    // The JSON schema every command reads (`nimble-bench simulate --graph FILE`).
    let file = std::env::temp_dir().join(format!("nimble-example-{}.graph.json", std::process::id()));
    graph.write_json(&file)?;
    let again = TaskGraph::read_json(&file)?;
    assert_eq!(again.len(), graph.len());
    println!("written to and read back from {}", file.display());
    std::fs::remove_file(&file).ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_example_runs() {
        super::main().unwrap();
    }
}
