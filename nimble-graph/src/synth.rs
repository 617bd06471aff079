//! Synthetic task graphs: chains, fans, NASNet-like cells, random layered DAGs and DNN-like
//! graphs, generated deterministically from a short specification such as `dnn:10000`.
//!
//! They exercise schedulers, the simulator and (later) the synthetic GPU executor on shapes that
//! the paper's networks have, at any size. Durations are drawn uniformly from 2–30 µs, the range
//! of batch-1 inference kernels on a modern GPU.

use std::fmt;
use std::str::FromStr;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::error::{GraphError, Result};
use crate::graph::{Node, TaskGraph, TaskGraphBuilder, MAX_NODES};

/// A synthetic graph family with its size parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyntheticSpec {
    /// `chain:N` – N tasks in a line (no concurrency at all).
    Chain { nodes: usize },
    /// `fan:B[:D]` – a source, B parallel branches of D tasks (default 1), a sink.
    Fan { branches: usize, depth: usize },
    /// `nasnet:C[:SEED]` – a stem, C NASNet-like cells (two inputs, five two-branch blocks,
    /// concat), a head.
    Nasnet { cells: usize, seed: u64 },
    /// `layered:N[:SEED]` – N tasks in random layers of up to √N tasks, each depending on one to
    /// three tasks of the previous three layers.
    Layered { nodes: usize, seed: u64 },
    /// `dnn:N[:SEED]` – N tasks of a DNN-like graph: conv chains, residual blocks and
    /// inception-like blocks of 2–4 branches, in random order.
    Dnn { nodes: usize, seed: u64 },
}

const EXPECTED: &str = "expected chain:N, fan:B[:D], nasnet:C[:SEED], layered:N[:SEED] or dnn:N[:SEED] with positive integers";

impl FromStr for SyntheticSpec {
    type Err = GraphError;

    fn from_str(spec: &str) -> Result<Self> {
        let invalid = |reason: &str| GraphError::InvalidSpec { spec: spec.to_string(), reason: reason.to_string() };
        let mut parts = spec.split(':');
        let family = parts.next().unwrap_or_default();
        let numbers: Vec<u64> = parts
            .map(|p| {
                p.parse::<u64>().map_err(|e| match e.kind() {
                    std::num::IntErrorKind::PosOverflow => invalid(&format!("`{p}` is too large (the most a graph may have is {MAX_NODES} nodes); {EXPECTED}")),
                    _ => invalid(&format!("`{p}` is not a non-negative integer; {EXPECTED}")),
                })
            })
            .collect::<Result<_>>()?;
        let size = |i: usize, default: Option<u64>| -> Result<usize> {
            match numbers.get(i).copied().or(default) {
                Some(0) => Err(invalid(&format!("sizes must be at least 1; {EXPECTED}"))),
                Some(n) => usize::try_from(n).map_err(|_| invalid("size too large")),
                None => Err(invalid(&format!("missing size; {EXPECTED}"))),
            }
        };
        let seed = numbers.get(1).copied().unwrap_or(0);
        let max_arguments = if family == "chain" { 1 } else { 2 };
        if numbers.len() > max_arguments {
            return Err(invalid(&format!("too many fields; {EXPECTED}")));
        }
        let parsed = match family {
            "chain" => SyntheticSpec::Chain { nodes: size(0, None)? },
            "fan" => SyntheticSpec::Fan { branches: size(0, None)?, depth: size(1, Some(1))? },
            "nasnet" => SyntheticSpec::Nasnet { cells: size(0, None)?, seed },
            "layered" => SyntheticSpec::Layered { nodes: size(0, None)?, seed },
            "dnn" => SyntheticSpec::Dnn { nodes: size(0, None)?, seed },
            _ => return Err(invalid(&format!("unknown family `{family}`; {EXPECTED}"))),
        };
        // Refused before anything is allocated: `fan:1000000:1000` would be a billion nodes.
        let nodes = parsed.max_nodes();
        if nodes > MAX_NODES as u128 {
            // A NASNet-like graph's size is known only once its branches are drawn: its bound
            // refuses it, and the message says so and how many cells the bound admits.
            let size = match parsed {
                SyntheticSpec::Nasnet { .. } => format!("it may have up to {} nodes (40 a cell; at most {} cells fit)", thousands(nodes), (MAX_NODES - 4) / 40),
                _ => format!("it has {} nodes", thousands(nodes)),
            };
            return Err(invalid(&format!("{size}, more than {MAX_NODES}, the most a graph may have (the analyses keep a bit per pair of tasks for each relation)")));
        }
        Ok(parsed)
    }
}

/// `n` with thousands separators.
fn thousands(n: u128) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl fmt::Display for SyntheticSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SyntheticSpec::Chain { nodes } => write!(f, "chain:{nodes}"),
            SyntheticSpec::Fan { branches, depth } => write!(f, "fan:{branches}:{depth}"),
            SyntheticSpec::Nasnet { cells, seed } => write!(f, "nasnet:{cells}:{seed}"),
            SyntheticSpec::Layered { nodes, seed } => write!(f, "layered:{nodes}:{seed}"),
            SyntheticSpec::Dnn { nodes, seed } => write!(f, "dnn:{nodes}:{seed}"),
        }
    }
}

impl SyntheticSpec {
    /// The most nodes the graph can have (exact except for `nasnet`, whose branches are 1–3
    /// tasks long).
    pub fn max_nodes(&self) -> u128 {
        match *self {
            SyntheticSpec::Chain { nodes } | SyntheticSpec::Layered { nodes, .. } | SyntheticSpec::Dnn { nodes, .. } => nodes as u128,
            SyntheticSpec::Fan { branches, depth } => branches as u128 * depth as u128 + 2,
            // Per cell: 4 preprocessing tasks, 10 branches of at most 3, 5 adds, a concat; a
            // stem of 2 and a head of 2.
            SyntheticSpec::Nasnet { cells, .. } => cells as u128 * 40 + 4,
        }
    }

    /// Generates the graph; the same specification always gives the same graph.
    ///
    /// # Panics
    /// If the graph would have more than [`MAX_NODES`] nodes (parsing refuses such a
    /// specification; only one built by hand can have them).
    pub fn generate(&self) -> TaskGraph {
        match *self {
            SyntheticSpec::Chain { nodes } => {
                let mut g = Generator::new(0);
                g.chain("synthetic::op", nodes, &[]);
                g.finish()
            }
            SyntheticSpec::Fan { branches, depth } => {
                let mut g = Generator::new(0);
                let source = g.task("synthetic::source", &[]);
                let ends: Vec<u64> = (0..branches).map(|_| g.chain("synthetic::branch", depth, &[source])).collect();
                g.task("synthetic::sink", &ends);
                g.finish()
            }
            SyntheticSpec::Nasnet { cells, seed } => nasnet_like(cells, seed),
            SyntheticSpec::Layered { nodes, seed } => layered(nodes, seed),
            SyntheticSpec::Dnn { nodes, seed } => dnn_like(nodes, seed),
        }
    }
}

/// Accumulates tasks with consecutive ids and random durations.
struct Generator {
    builder: TaskGraphBuilder,
    rng: ChaCha8Rng,
    next_id: u64,
}

impl Generator {
    fn new(seed: u64) -> Self {
        Generator { builder: TaskGraphBuilder::new(), rng: ChaCha8Rng::seed_from_u64(seed), next_id: 0 }
    }

    fn count(&self) -> usize {
        self.next_id as usize
    }

    fn task(&mut self, op: &str, inputs: &[u64]) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let duration = (self.rng.random_range(2.0..30.0f64) * 10.0).round() / 10.0;
        self.builder.add_node(Node::new(id, op).with_duration(duration)).expect("generated ids are fresh, durations in range and specs within MAX_NODES");
        for &input in inputs {
            self.builder.add_edge(input, id).expect("generated edges join distinct tasks");
        }
        id
    }

    /// `length` tasks in a line after `inputs`; returns the last (or the single input when
    /// `length` is 0 and there is exactly one).
    fn chain(&mut self, op: &str, length: usize, inputs: &[u64]) -> u64 {
        let mut last = inputs.to_vec();
        for _ in 0..length {
            last = vec![self.task(op, &last)];
        }
        last[0]
    }

    fn finish(self) -> TaskGraph {
        self.builder.build().expect("generated graphs are acyclic")
    }
}

fn nasnet_like(cells: usize, seed: u64) -> TaskGraph {
    let mut g = Generator::new(seed);
    let stem = g.task("synthetic::stem", &[]);
    let (mut previous_previous, mut previous) = (stem, g.task("synthetic::stem", &[stem]));
    for _ in 0..cells {
        let mut states =
            vec![g.chain("synthetic::preprocess", 2, &[previous_previous]), g.chain("synthetic::preprocess", 2, &[previous])];
        let mut used = vec![false; 7];
        for _ in 0..5 {
            let left = nasnet_branch(&mut g, &states, &mut used);
            let right = nasnet_branch(&mut g, &states, &mut used);
            states.push(g.task("synthetic::add", &[left, right]));
        }
        let unused: Vec<u64> = (2..states.len()).filter(|&i| !used[i]).map(|i| states[i]).collect();
        previous_previous = previous;
        previous = g.task("synthetic::concat", &unused);
    }
    g.chain("synthetic::head", 2, &[previous]);
    g.finish()
}

/// One operand of a NASNet-like block: a chain of 1–3 tasks on a randomly chosen earlier state.
fn nasnet_branch(g: &mut Generator, states: &[u64], used: &mut [bool]) -> u64 {
    let pick = g.rng.random_range(0..states.len());
    used[pick] = true;
    let length = g.rng.random_range(1..=3);
    g.chain("synthetic::branch", length, &[states[pick]])
}

fn layered(nodes: usize, seed: u64) -> TaskGraph {
    let mut g = Generator::new(seed);
    let max_width = ((nodes as f64).sqrt() as usize).max(2);
    let mut layers: Vec<Vec<u64>> = Vec::new();
    while g.count() < nodes {
        let width = g.rng.random_range(1..=max_width).min(nodes - g.count());
        let mut layer = Vec::with_capacity(width);
        for _ in 0..width {
            let mut inputs = Vec::new();
            if let Some(previous) = layers.last() {
                inputs.push(previous[g.rng.random_range(0..previous.len())]);
                for _ in 0..g.rng.random_range(0..=2) {
                    let back = g.rng.random_range(1..=layers.len().min(3));
                    let source = &layers[layers.len() - back];
                    inputs.push(source[g.rng.random_range(0..source.len())]);
                }
            }
            inputs.sort_unstable();
            inputs.dedup();
            layer.push(g.task("synthetic::op", &inputs));
        }
        layers.push(layer);
    }
    g.finish()
}

fn dnn_like(nodes: usize, seed: u64) -> TaskGraph {
    let mut g = Generator::new(seed);
    let mut x = g.task("synthetic::input", &[]);
    loop {
        let left = nodes - g.count();
        let kind = g.rng.random_range(0..3);
        let branches = g.rng.random_range(2..=4usize);
        let lengths: Vec<usize> = (0..branches).map(|_| g.rng.random_range(1..=4)).collect();
        let inception_size = lengths.iter().sum::<usize>() + 1;
        x = match kind {
            0 if left >= inception_size => {
                let ends: Vec<u64> = lengths.iter().map(|&l| g.chain("synthetic::branch", l, &[x])).collect();
                g.task("synthetic::concat", &ends)
            }
            1 if left >= 4 => {
                let body = g.chain("synthetic::conv", 3, &[x]);
                g.task("synthetic::add", &[body, x])
            }
            _ if left >= 1 => g.chain("synthetic::conv", left.min(3), &[x]),
            _ => return g.finish(),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_exact_where_promised() {
        for (spec, nodes) in [("chain:7", 7), ("fan:5:3", 17), ("layered:500:3", 500), ("dnn:1000", 1000), ("dnn:1", 1)] {
            let graph = spec.parse::<SyntheticSpec>().unwrap().generate();
            assert_eq!(graph.len(), nodes, "{spec}");
        }
    }

    #[test]
    fn generation_is_deterministic_and_seeded() {
        let a = "layered:300:1".parse::<SyntheticSpec>().unwrap().generate().to_json_string();
        let b = "layered:300:1".parse::<SyntheticSpec>().unwrap().generate().to_json_string();
        let c = "layered:300:2".parse::<SyntheticSpec>().unwrap().generate().to_json_string();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn bad_specs_are_rejected_with_the_expected_forms() {
        for spec in ["", "tree:5", "chain", "chain:0", "chain:x", "chain:3:4", "fan:2:3:4", "dnn:-1"] {
            let error = spec.parse::<SyntheticSpec>().unwrap_err().to_string();
            assert!(error.contains("expected") || error.contains("too large"), "{spec}: {error}");
        }
    }

    #[test]
    fn display_round_trips() {
        for spec in ["chain:3", "fan:4:2", "nasnet:2:0", "layered:10:5", "dnn:20:1"] {
            assert_eq!(spec.parse::<SyntheticSpec>().unwrap().to_string(), spec);
        }
    }
}
