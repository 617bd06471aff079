//! `TaskGraph`, its nodes, and the builder that validates them.

use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::cmp::Reverse;

use serde::{Deserialize, Serialize};

use crate::error::{GraphError, Result};

/// One GPU task: an operator launch such as `aten::conv2d` or a synthetic kernel.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// The user's id for this node; unique within a graph, any non-negative integer.
    pub id: u64,
    /// Operator name, e.g. `aten::conv2d`.
    pub op: String,
    /// Shapes of the op's tensor arguments as recorded (inputs then outputs), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shapes: Option<Vec<Vec<i64>>>,
    /// Measured or estimated GPU time of the task in microseconds, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<f64>,
    /// Free-form attributes (e.g. `sm_share` for the simulator, or what a frontend recorded).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attrs: BTreeMap<String, serde_json::Value>,
}

impl Node {
    /// A node with only an id and an op name.
    pub fn new(id: u64, op: impl Into<String>) -> Self {
        Node { id, op: op.into(), shapes: None, duration_us: None, attrs: BTreeMap::new() }
    }

    /// The same node with `duration_us` set.
    pub fn with_duration(mut self, duration_us: f64) -> Self {
        self.duration_us = Some(duration_us);
        self
    }
}

/// A validated directed acyclic graph of GPU tasks.
///
/// Nodes are addressed by their *index* (`0..len()`, the order in which they were added); the
/// user's ids are kept on the nodes and mapped back with [`TaskGraph::index_of`]. Edges `u -> v`
/// mean "v may start only after u has finished". Parallel duplicate edges are merged. A
/// `TaskGraph` can only be obtained through [`TaskGraphBuilder::build`] (or the JSON reader, which
/// uses it), so every instance is acyclic and free of self-edges and dangling ids.
#[derive(Clone, Debug)]
pub struct TaskGraph {
    nodes: Vec<Node>,
    successors: Vec<Vec<usize>>,
    predecessors: Vec<Vec<usize>>,
    edge_count: usize,
    index_of: HashMap<u64, usize>,
    topological_order: Vec<usize>,
    topological_position: Vec<usize>,
}

impl TaskGraph {
    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Number of distinct edges.
    pub fn edge_count(&self) -> usize {
        self.edge_count
    }

    /// All nodes, by index.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The node at `index`.
    ///
    /// # Panics
    /// When `index >= len()`: indices come from this graph's own API, never from user data.
    pub fn node(&self, index: usize) -> &Node {
        &self.nodes[index]
    }

    /// The index of the node with the user id `id`.
    pub fn index_of(&self, id: u64) -> Option<usize> {
        self.index_of.get(&id).copied()
    }

    /// The user id of the node at `index`.
    pub fn id_of(&self, index: usize) -> u64 {
        self.nodes[index].id
    }

    /// Direct successors of `index`, in the order their edges were added.
    pub fn successors(&self, index: usize) -> &[usize] {
        &self.successors[index]
    }

    /// Direct predecessors of `index`, in the order their edges were added (for an operator,
    /// usually the order of its inputs).
    pub fn predecessors(&self, index: usize) -> &[usize] {
        &self.predecessors[index]
    }

    /// All edges as `(from, to)` index pairs, grouped by source node.
    pub fn edges(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.successors.iter().enumerate().flat_map(|(u, vs)| vs.iter().map(move |&v| (u, v)))
    }

    /// A topological order: every edge goes from an earlier to a later node. Among the nodes
    /// ready at each step the one added first comes first, so a graph recorded in program order
    /// keeps that order.
    pub fn topological_order(&self) -> &[usize] {
        &self.topological_order
    }

    /// Position of each node (by index) in [`TaskGraph::topological_order`].
    pub fn topological_position(&self) -> &[usize] {
        &self.topological_position
    }

    /// The node's `duration_us`, or 0 when it has none.
    pub fn duration_or_zero(&self, index: usize) -> f64 {
        self.nodes[index].duration_us.unwrap_or(0.0)
    }

    /// A copy of this graph with every node's `duration_us` set by `duration(index, node)`.
    pub fn with_durations(&self, mut duration: impl FnMut(usize, &Node) -> Option<f64>) -> TaskGraph {
        let mut graph = self.clone();
        for (index, node) in graph.nodes.iter_mut().enumerate() {
            let value = duration(index, node);
            node.duration_us = value;
        }
        graph
    }

    /// A copy of this graph whose nodes' `duration_us` and `attrs` `update(index, duration,
    /// attrs)` may change (ids, ops and edges stay); every node is checked as a built graph's.
    ///
    /// # Errors
    /// [`GraphError::InvalidField`] for a duration or `sm_share` out of range.
    pub fn with_updated_nodes(&self, mut update: impl FnMut(usize, &mut Option<f64>, &mut BTreeMap<String, serde_json::Value>)) -> Result<TaskGraph> {
        let mut graph = self.clone();
        for (index, node) in graph.nodes.iter_mut().enumerate() {
            update(index, &mut node.duration_us, &mut node.attrs);
            check_fields(node)?;
        }
        Ok(graph)
    }
}

/// The most nodes a graph may have. The analyses keep each relation between tasks
/// (reachability, the minimum equivalent graph, happens-before) as bit rows, V²/8 bytes at most
/// (1.25 GB at this limit), so a larger graph would exhaust memory rather than fail.
pub const MAX_NODES: usize = 100_000;

/// The longest duration a task may have, µs (1,000 s): anything longer is a mistake, and sums of
/// such values lose all precision.
pub const MAX_DURATION_US: f64 = 1e9;

fn too_large() -> GraphError {
    GraphError::TooLarge { limit: MAX_NODES, limit_gb: (MAX_NODES as f64).powi(2) / 8.0 / 1e9 }
}

/// `value` as a reader takes it in: exponent notation beyond a million (1e308, not 309 digits).
pub fn compact(value: f64) -> String {
    if value.is_finite() && value.abs() >= 1e6 {
        format!("{value:e}")
    } else {
        value.to_string()
    }
}

/// A node's duration must be a finite number of µs in [0, MAX_DURATION_US], and its `sm_share`
/// (the simulator's share of the GPU's SMs), when given, a number in (0, 1].
fn check_fields(node: &Node) -> Result<()> {
    let invalid = |field, value: String, expected: &str| GraphError::InvalidField { id: node.id, field, value, expected: expected.into() };
    if let Some(d) = node.duration_us {
        if !(0.0..=MAX_DURATION_US).contains(&d) {
            return Err(invalid("duration_us", compact(d), "a finite number of microseconds from 0 to 1e9"));
        }
    }
    if let Some(share) = node.attrs.get("sm_share") {
        match share.as_f64() {
            Some(x) if x > 0.0 && x <= 1.0 => {}
            _ => return Err(invalid("sm_share", share.to_string(), "a number in (0, 1]: the share of the GPU's SMs the task occupies")),
        }
    }
    Ok(())
}

/// Builds a [`TaskGraph`], rejecting duplicate ids, self-edges, dangling ids and cycles.
///
/// # Example
/// ```
/// use nimble_graph::{Node, TaskGraphBuilder};
/// let mut builder = TaskGraphBuilder::new();
/// builder.add_node(Node::new(10, "aten::conv2d"))?;
/// builder.add_node(Node::new(20, "aten::relu"))?;
/// builder.add_edge(10, 20)?;
/// let graph = builder.build()?;
/// assert_eq!(graph.len(), 2);
/// assert_eq!(graph.successors(0), &[1]);
/// # Ok::<(), nimble_graph::GraphError>(())
/// ```
#[derive(Debug, Default)]
pub struct TaskGraphBuilder {
    nodes: Vec<Node>,
    index_of: HashMap<u64, usize>,
    edges: Vec<(u64, u64)>,
}

impl TaskGraphBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a node; fails if its id is already taken.
    pub fn add_node(&mut self, node: Node) -> Result<usize> {
        if self.index_of.contains_key(&node.id) {
            return Err(GraphError::DuplicateId { id: node.id });
        }
        if self.nodes.len() >= MAX_NODES {
            return Err(too_large());
        }
        check_fields(&node)?;
        let index = self.nodes.len();
        self.index_of.insert(node.id, index);
        self.nodes.push(node);
        Ok(index)
    }

    /// Adds the dependency `from -> to` by user ids; fails on a self-edge. Unknown ids are
    /// reported by [`TaskGraphBuilder::build`], so edges may be added before their nodes.
    pub fn add_edge(&mut self, from: u64, to: u64) -> Result<()> {
        if from == to {
            return Err(GraphError::SelfEdge { id: from });
        }
        self.edges.push((from, to));
        Ok(())
    }

    /// Validates and freezes the graph.
    pub fn build(self) -> Result<TaskGraph> {
        let n = self.nodes.len();
        let mut successors = vec![Vec::new(); n];
        let mut predecessors = vec![Vec::new(); n];
        let mut seen = HashSet::with_capacity(self.edges.len());
        for &(from, to) in &self.edges {
            let lookup = |id: u64| {
                self.index_of.get(&id).copied().ok_or(GraphError::UnknownId { from, to, missing: id })
            };
            let (u, v) = (lookup(from)?, lookup(to)?);
            if seen.insert((u, v)) {
                successors[u].push(v);
                predecessors[v].push(u);
            }
        }
        let topological_order = kahn_order(&successors, &predecessors);
        if topological_order.len() < n {
            return Err(cycle_error(&self.nodes, &predecessors, &topological_order));
        }
        let mut topological_position = vec![0; n];
        for (position, &node) in topological_order.iter().enumerate() {
            topological_position[node] = position;
        }
        Ok(TaskGraph {
            nodes: self.nodes,
            successors,
            predecessors,
            edge_count: seen.len(),
            index_of: self.index_of,
            topological_order,
            topological_position,
        })
    }
}

/// Kahn's algorithm preferring the lowest index among ready nodes; returns fewer than `n` nodes
/// when there is a cycle.
fn kahn_order(successors: &[Vec<usize>], predecessors: &[Vec<usize>]) -> Vec<usize> {
    let n = successors.len();
    let mut remaining: Vec<usize> = predecessors.iter().map(Vec::len).collect();
    let mut ready: BinaryHeap<Reverse<usize>> =
        (0..n).filter(|&v| remaining[v] == 0).map(Reverse).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(Reverse(u)) = ready.pop() {
        order.push(u);
        for &v in &successors[u] {
            remaining[v] -= 1;
            if remaining[v] == 0 {
                ready.push(Reverse(v));
            }
        }
    }
    order
}

/// Finds one cycle among the nodes Kahn's algorithm could not order and reports it.
fn cycle_error(nodes: &[Node], predecessors: &[Vec<usize>], ordered: &[usize]) -> GraphError {
    let mut done = vec![false; nodes.len()];
    for &v in ordered {
        done[v] = true;
    }
    // Every unordered node has an unordered predecessor, so walking predecessors must repeat.
    let start = (0..nodes.len()).find(|&v| !done[v]).expect("an unordered node exists");
    let mut position = HashMap::new();
    let mut walk = vec![start];
    let mut current = start;
    loop {
        position.insert(current, walk.len() - 1);
        current = *predecessors[current]
            .iter()
            .find(|&&p| !done[p])
            .expect("an unordered node has an unordered predecessor");
        if let Some(&first) = position.get(&current) {
            // walk[first..] runs against the edges from `current` back to a predecessor of
            // `current`; reversed and prefixed with `current` it follows the edges round.
            let cycle: Vec<u64> = std::iter::once(current)
                .chain(walk[first..].iter().rev().copied())
                .map(|v| nodes[v].id)
                .collect();
            let node = &nodes[current];
            return GraphError::Cycle { id: node.id, op: node.op.clone(), cycle };
        }
        walk.push(current);
    }
}
