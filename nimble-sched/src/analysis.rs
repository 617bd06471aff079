//! The analyses every stream assigner may need, computed once per graph.

use nimble_graph::{Adjacency, Reachability, TaskGraph};

/// A task graph with its reachability relation and minimum equivalent graph (MEG).
///
/// Computing these dominates the cost of most algorithms, so a caller comparing several
/// algorithms on one graph computes them once and passes the same `Analysis` to each.
#[derive(Clone, Debug)]
pub struct Analysis<'g> {
    graph: &'g TaskGraph,
    reachability: Reachability,
    meg_successors: Adjacency,
    meg_predecessors: Adjacency,
    stream_classes: Option<Vec<u32>>,
}

impl<'g> Analysis<'g> {
    /// Analyses `graph`: O(E·V/64) time, at most V²/16 bytes.
    pub fn new(graph: &'g TaskGraph) -> Self {
        let (reachability, meg_successors) = graph.reachability_and_reduction();
        let meg_predecessors = meg_successors.reversed(graph.len());
        let stream_classes = stream_classes(graph);
        Analysis { graph, reachability, meg_successors, meg_predecessors, stream_classes }
    }

    /// The graph analysed.
    pub fn graph(&self) -> &'g TaskGraph {
        self.graph
    }

    /// Which node reaches which.
    pub fn reachability(&self) -> &Reachability {
        &self.reachability
    }

    /// Successors of each node in the MEG, in topological order.
    pub fn meg_successors(&self) -> &Adjacency {
        &self.meg_successors
    }

    /// Predecessors of each node in the MEG, ascending.
    pub fn meg_predecessors(&self) -> &Adjacency {
        &self.meg_predecessors
    }

    /// Number of MEG edges.
    pub fn meg_edge_count(&self) -> usize {
        self.meg_successors.edge_count()
    }

    /// Each node's stream class, numbered in order of appearance (0: nodes without the
    /// `stream_class` attribute, such as compute), or `None` when no node has one. Assigners
    /// that honour classes (`nimble`) never put nodes of two classes on one stream: collectives
    /// get streams of their own and overlap compute instead of queueing behind it.
    pub fn stream_classes(&self) -> Option<&[u32]> {
        self.stream_classes.as_deref()
    }

    /// The graph's width (maximum logical concurrency).
    pub fn width(&self) -> usize {
        self.graph.width(&self.reachability)
    }
}

fn stream_classes(graph: &TaskGraph) -> Option<Vec<u32>> {
    let mut names: Vec<String> = vec![String::new()];
    let mut any = false;
    let classes = graph
        .nodes()
        .iter()
        .map(|node| {
            let name = match node.attrs.get("stream_class") {
                Some(value) => {
                    any = true;
                    value.as_str().map_or_else(|| value.to_string(), str::to_string)
                }
                None => String::new(),
            };
            match names.iter().position(|n| *n == name) {
                Some(k) => k as u32,
                None => {
                    names.push(name);
                    (names.len() - 1) as u32
                }
            }
        })
        .collect();
    any.then_some(classes)
}
