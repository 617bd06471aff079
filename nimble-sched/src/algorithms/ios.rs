//! `ios`: IOS's stage-by-stage schedule, found by its dynamic program over stages.

use nimble_graph::TaskGraph;
use serde_json::Value;

use super::weights::weight;
use crate::{Analysis, StreamAssigner, StreamPlan};

/// The most tasks one dynamic program covers.
pub const MAX_WINDOW: usize = 16;

/// What a barrier between stages costs in the model, µs: the calibrated simulator's dependency
/// latency in graph launch (`SimulatorConfig::graph()`, a test keeps them equal).
pub const STAGE_BARRIER_US: f64 = 0.7;

/// The graph runs as a sequence of stages; a stage's tasks split into groups (the connected
/// pieces of the stage), each group one after another on its own stream, the groups side by
/// side. A dynamic program picks the stages: the cheapest cost of a set of tasks closed under
/// predecessors is, over every last stage it may end with, the cost of the rest plus the
/// stage's latency. The stage latency is modelled, not measured: the longest group (by
/// `duration_us`, 1 when unknown) or, when the stage's kernels would overfill the GPU, the sum
/// of duration × `sm_share` (0 when unknown, as the simulator's defaults), plus one dependency
/// latency of the calibrated simulator for the barrier between stages. Group i of each stage
/// goes to stream i; launch order is stage by stage, each in topological order.
///
/// From Ding, Zhu, Jia and Pekhimenko, "IOS: Inter-Operator Scheduler for CNN Acceleration"
/// (MLSys 2021), which measures each candidate stage on the GPU. Its state space is every
/// downward-closed set of a block, so the program is bounded: the graph is cut where no edge
/// passes a task that every other task precedes or follows (IOS's blocks), and a block of more than `K` tasks into windows of `K`
/// consecutive tasks in topological order, each planned alone (`K` defaults to 12, at most
/// [`MAX_WINDOW`]). IOS's wavefront baseline (every stage one level of the graph) is `level`.
/// The plan syncs only real dependencies, not a barrier after every stage, so it is never
/// slower than the stage-synchronous schedule it encodes.
///
/// # Complexity
/// O(V·3^K / K + E) beyond the analysis: every window's 2^K sets and their sub-stages.
pub struct Ios {
    /// The most tasks one dynamic program covers (1..=[`MAX_WINDOW`]).
    pub window: usize,
}

impl StreamAssigner for Ios {
    fn name(&self) -> String {
        format!("ios:{}", self.window)
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let graph = analysis.graph();
        let mut stream_of = vec![0; graph.len()];
        let mut order = Vec::with_capacity(graph.len());
        for stage in stages(graph, self.window) {
            for (i, group) in stage.iter().enumerate() {
                for &v in group {
                    stream_of[v] = i;
                }
            }
            let mut tasks: Vec<usize> = stage.concat();
            tasks.sort_by_key(|&v| graph.topological_position()[v]);
            order.extend(tasks);
        }
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, Some(order))
    }
}

/// IOS's stages of `graph`, each a list of groups (tasks in topological order), groups ordered
/// by their first task.
pub fn stages(graph: &TaskGraph, window: usize) -> Vec<Vec<Vec<usize>>> {
    let window = window.clamp(1, MAX_WINDOW);
    let topo = graph.topological_order();
    let position = graph.topological_position();
    let n = graph.len();
    // Edges passing over each position: a block boundary where none does.
    let mut passing = vec![0i64; n + 1];
    for (u, w) in graph.edges() {
        let (a, b) = (position[u].min(position[w]), position[u].max(position[w]));
        if b > a + 1 {
            passing[a + 1] += 1;
            passing[b] -= 1;
        }
    }
    // A task every other one comes before or after: no edge passes it, every task before it
    // has a successor (so reaches it) and every task after it a predecessor.
    let mut source_after = vec![false; n + 1];
    for p in (0..n).rev() {
        source_after[p] = source_after[p + 1] || graph.predecessors(topo[p]).is_empty();
    }
    let mut cuts = Vec::new();
    let (mut open, mut sink_before) = (0, false);
    for (p, change) in passing.iter().take(n).enumerate() {
        open += change;
        if open == 0 && !sink_before && !source_after[p + 1] {
            cuts.push(p);
        }
        sink_before |= graph.successors(topo[p]).is_empty();
    }
    // Blocks: runs between boundary tasks, each boundary task a block of its own.
    let mut blocks: Vec<&[usize]> = Vec::new();
    let mut start = 0;
    for &p in &cuts {
        if p > start {
            blocks.push(&topo[start..p]);
        }
        blocks.push(&topo[p..=p]);
        start = p + 1;
    }
    if start < n {
        blocks.push(&topo[start..]);
    }
    let barrier = STAGE_BARRIER_US;
    blocks.iter().flat_map(|block| block.chunks(window)).flat_map(|tasks| window_stages(graph, tasks, barrier)).collect()
}

/// The dynamic program over one window of tasks (consecutive in topological order).
fn window_stages(graph: &TaskGraph, tasks: &[usize], barrier: f64) -> Vec<Vec<Vec<usize>>> {
    let m = tasks.len();
    let local = |v: usize| tasks.iter().position(|&t| t == v);
    let mut predecessors = vec![0u32; m];
    let mut neighbours = vec![0u32; m];
    for (i, &v) in tasks.iter().enumerate() {
        for &u in graph.predecessors(v) {
            if let Some(j) = local(u) {
                predecessors[i] |= 1 << j;
                neighbours[i] |= 1 << j;
                neighbours[j] |= 1 << i;
            }
        }
    }
    let cost: Vec<f64> = tasks.iter().map(|&v| weight(graph, v)).collect();
    let share: Vec<f64> = tasks
        .iter()
        .map(|&v| graph.node(v).attrs.get("sm_share").and_then(Value::as_f64).unwrap_or(0.0).clamp(0.0, 1.0))
        .collect();
    let full = (1u32 << m) - 1;
    // Closed under predecessors: without its last task (highest bit), still closed, and that
    // task's predecessors inside.
    let mut closed = vec![false; 1 << m];
    closed[0] = true;
    for set in 1..=full {
        let last = 31 - set.leading_zeros();
        let rest = set & !(1 << last);
        closed[set as usize] = closed[rest as usize] && predecessors[last as usize] & !rest == 0;
    }
    let latency = |stage: u32| {
        let (mut longest, mut filled) = (0.0f64, 0.0f64);
        for group in groups(stage, &neighbours) {
            longest = longest.max(bits(group).map(|i| cost[i]).sum());
        }
        for i in bits(stage) {
            filled += cost[i] * share[i];
        }
        longest.max(filled) + barrier
    };
    let latency: Vec<f64> = (0..=full).map(latency).collect();
    let mut best = vec![f64::INFINITY; 1 << m];
    let mut last_stage = vec![0u32; 1 << m];
    best[0] = 0.0;
    for set in 1..=full {
        if !closed[set as usize] {
            continue;
        }
        let mut stage = set;
        while stage != 0 {
            let rest = set & !stage;
            if closed[rest as usize] {
                let total = best[rest as usize] + latency[stage as usize];
                if total < best[set as usize] {
                    best[set as usize] = total;
                    last_stage[set as usize] = stage;
                }
            }
            stage = (stage - 1) & set;
        }
    }
    let mut stages = Vec::new();
    let mut set = full;
    while set != 0 {
        let stage = last_stage[set as usize];
        stages.push(groups(stage, &neighbours).map(|group| bits(group).map(|i| tasks[i]).collect()).collect());
        set &= !stage;
    }
    stages.reverse();
    stages
}

/// The indices of a set's bits, lowest first.
fn bits(set: u32) -> impl Iterator<Item = usize> {
    (0..32).filter(move |&i| set & (1 << i) != 0)
}

/// A stage's connected pieces, by their lowest task.
fn groups(stage: u32, neighbours: &[u32]) -> impl Iterator<Item = u32> + '_ {
    let mut left = stage;
    std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        let mut group = left & left.wrapping_neg();
        loop {
            let grown = bits(group).fold(group, |acc, i| acc | (neighbours[i] & stage));
            if grown == group {
                break;
            }
            group = grown;
        }
        left &= !group;
        Some(group)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use nimble_graph::{Node, TaskGraphBuilder};

    fn graph(nodes: &[(u64, f64)], edges: &[(u64, u64)]) -> TaskGraph {
        let mut builder = TaskGraphBuilder::new();
        for &(id, cost) in nodes {
            builder.add_node(Node::new(id, "op").with_duration(cost)).expect("a new id");
        }
        for &(u, v) in edges {
            builder.add_edge(u, v).expect("known ids");
        }
        builder.build().expect("a DAG")
    }

    /// A (1) → B (10) beside C (10): the wavefront runs {A, C} then {B} (10 + 10); the program
    /// finds one stage, the group A → B beside C (11).
    #[test]
    fn the_program_beats_the_wavefront_stages() {
        let graph = graph(&[(0, 1.0), (1, 10.0), (2, 10.0)], &[(0, 1)]);
        let found = stages(&graph, 12);
        let ids: Vec<Vec<Vec<u64>>> = found.iter().map(|s| s.iter().map(|g| g.iter().map(|&v| graph.id_of(v)).collect()).collect()).collect();
        assert_eq!(ids, vec![vec![vec![0, 1], vec![2]]]);
        let analysis = Analysis::new(&graph);
        let plan = Ios { window: 12 }.assign(&analysis);
        assert_ne!(plan.stream_of[graph.index_of(0).unwrap()], plan.stream_of[graph.index_of(2).unwrap()]);
    }

    /// A diamond 0 → {1, 2} → 3 is three blocks, so three stages, the middle one two groups;
    /// every window size issues the tasks stage by stage.
    #[test]
    fn blocks_and_small_windows() {
        let diamond = graph(&[(0, 5.0), (1, 5.0), (2, 5.0), (3, 5.0)], &[(0, 1), (0, 2), (1, 3), (2, 3)]);
        let found = stages(&diamond, 12);
        assert_eq!(found.iter().map(Vec::len).collect::<Vec<_>>(), vec![1, 2, 1], "{found:?}");
        let analysis = Analysis::new(&diamond);
        for window in 1..=4 {
            let plan = Ios { window }.assign(&analysis);
            assert_eq!(plan.order.len(), 4, "window {window}");
            let at = |id| plan.order.iter().position(|&v| diamond.id_of(v) == id).expect("issued");
            assert!(at(0) < at(1) && at(0) < at(2) && at(1) < at(3) && at(2) < at(3), "window {window}");
        }
    }
}
