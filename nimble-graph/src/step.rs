//! A whole training step as a task graph: the forward, the loss, the backward, the gradient
//! all-reduces of data parallelism, and the optimizer.
//!
//! A frontend records the forward only (the backward is run by the framework's autograd). The
//! step around it follows from the forward's structure:
//!
//! * **Backward.** Every forward node whose result depends on a parameter (a parameter reader
//!   or a descendant of one) gets a backward node (`<op>:backward`, attribute `forward` = the
//!   forward node's id). Its gradient input is the sum of what its forward successors' backward
//!   nodes give back, so it depends on those and on the loss. Its duration is
//!   `backward_factor` × the forward node's (a convolution's backward computes two gradients of
//!   the forward's size: 2 by default).
//! * **Buckets.** Parameters are those named by the forward nodes' `params` attribute (a list
//!   of `{"index", "bytes", "dtype"}`, `index` numbering parameters in order of first use).
//!   They go into all-reduce buckets the way PyTorch DDP makes them ([`buckets`]).
//! * **Collectives.** One `nccl:all_reduce` node per bucket (attributes `stream_class` =
//!   `collective`, `bucket`, `bytes`), after the backward nodes of every reader of its
//!   parameters and after the previous bucket's all-reduce: every rank issues them in bucket
//!   order, and one communicator runs them one at a time. No duration: the caller prices them
//!   (for example with a ring model of its interconnect).
//! * **Optimizer.** On one GPU, one node that updates every parameter (a fused multi-tensor
//!   kernel) after every parameter's gradient. Data parallel, one node per bucket that updates
//!   its parameters (attribute `bucket`), after that bucket's all-reduce and every parameter's
//!   gradient: the backward is over before any parameter changes, and the earlier buckets'
//!   updates run while the last all-reduces do.
//!
//! Node ids: the forward's are kept; the loss, the backward nodes, the collectives and the
//! optimizer nodes are numbered after the largest forward id, in that order.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::error::{GraphError, Result};
use crate::graph::{Node, TaskGraph, TaskGraphBuilder};

/// The `stream_class` of collective nodes: the stream assigners that honour classes never put
/// them on a stream with compute.
pub const COLLECTIVE_CLASS: &str = "collective";

/// The bucket of each parameter (`params` in order of first use in the forward), numbered in
/// launch order; `None` for parameters without a gradient. As PyTorch DDP: buckets take
/// parameters in reverse order (the backward makes the last ones' gradients first) and close
/// once they hold `first_bytes` (the first bucket) or `bucket_bytes` (the others), or the next
/// parameter has another dtype.
pub fn buckets<K: PartialEq + Copy>(params: &[Option<(usize, K)>], first_bytes: usize, bucket_bytes: usize) -> Vec<Option<usize>> {
    let mut bucket_of = vec![None; params.len()];
    let (mut bucket, mut filled, mut kind) = (0usize, 0usize, None);
    for i in (0..params.len()).rev() {
        let Some((bytes, k)) = params[i] else { continue };
        let limit = if bucket == 0 { first_bytes } else { bucket_bytes };
        if kind.is_some() && (kind != Some(k) || filled >= limit) {
            bucket += 1;
            filled = 0;
        }
        kind = Some(k);
        filled += bytes;
        bucket_of[i] = Some(bucket);
    }
    bucket_of
}

/// Each bucket's parameters in order (from [`buckets`]' numbering), and the parameters in none.
pub fn bucket_members(bucket_of: &[Option<usize>]) -> (Vec<Vec<usize>>, Vec<usize>) {
    let n = bucket_of.iter().flatten().max().map_or(0, |b| b + 1);
    let mut members = vec![Vec::new(); n];
    let mut unbucketed = Vec::new();
    for (i, b) in bucket_of.iter().enumerate() {
        match *b {
            Some(b) => members[b].push(i),
            None => unbucketed.push(i),
        }
    }
    (members, unbucketed)
}

/// How the step around a forward is built.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOptions {
    /// Data parallel: the first bucket's size and the others', bytes (DDP: 1 MiB, 25 MiB).
    /// `None`: one GPU, no collectives.
    pub buckets: Option<(usize, usize)>,
    /// A backward node's duration over its forward node's.
    pub backward_factor: f64,
}

impl StepOptions {
    /// One GPU: no collectives; backward nodes twice as long as their forward nodes.
    pub fn single_gpu() -> Self {
        StepOptions { buckets: None, backward_factor: 2.0 }
    }

    /// Data parallel with DDP's bucket sizes (1 MiB first, then 25 MiB).
    pub fn data_parallel() -> Self {
        StepOptions { buckets: Some((1 << 20, 25 << 20)), ..Self::single_gpu() }
    }
}

/// One parameter as the forward's `params` attributes give it.
#[derive(Clone, Debug, PartialEq)]
pub struct Parameter {
    pub bytes: usize,
    pub dtype: String,
    /// Indices of the forward nodes that read it.
    pub readers: Vec<usize>,
}

/// A training step's task graph and what it was built from.
#[derive(Clone, Debug)]
pub struct TrainingStep {
    pub graph: TaskGraph,
    /// The parameters, by index.
    pub parameters: Vec<Parameter>,
    /// Each bucket's parameters and bytes, in launch order.
    pub buckets: Vec<(Vec<usize>, usize)>,
    /// Node indices in `graph`: the collective of each bucket, and the optimizer nodes (one per
    /// bucket, in bucket order; one in all without buckets).
    pub collectives: Vec<usize>,
    pub optimizers: Vec<usize>,
}

/// Reads the `params` attributes of `forward`'s nodes.
pub fn parameters(forward: &TaskGraph) -> Result<Vec<Parameter>> {
    let mut found: BTreeMap<usize, Parameter> = BTreeMap::new();
    for (v, node) in forward.nodes().iter().enumerate() {
        let Some(list) = node.attrs.get("params") else { continue };
        let invalid = |value: &Value| GraphError::InvalidField {
            id: node.id,
            field: "params",
            value: value.to_string(),
            expected: "a list of {\"index\": parameter number, \"bytes\": its size, \"dtype\": its element type}, one size and type per parameter".into(),
        };
        let entries = list.as_array().ok_or_else(|| invalid(list))?;
        for entry in entries {
            let index = entry.get("index").and_then(Value::as_u64).ok_or_else(|| invalid(entry))? as usize;
            let bytes = entry.get("bytes").and_then(Value::as_u64).ok_or_else(|| invalid(entry))? as usize;
            let dtype = entry.get("dtype").and_then(Value::as_str).ok_or_else(|| invalid(entry))?;
            let parameter = found.entry(index).or_insert_with(|| Parameter { bytes, dtype: dtype.into(), readers: Vec::new() });
            if parameter.bytes != bytes || parameter.dtype != dtype {
                return Err(invalid(entry));
            }
            parameter.readers.push(v);
        }
    }
    if let Some((gap, _)) = found.keys().enumerate().find(|(i, k)| i != *k) {
        return Err(GraphError::InvalidOption {
            what: "the forward's parameter numbering",
            value: format!("missing parameter {gap} (no node reads it)"),
            expected: "parameters numbered 0, 1, 2, … without gaps".into(),
        });
    }
    Ok(found.into_values().collect())
}

/// The whole step around `forward` (see the [module documentation](self)).
pub fn training_step(forward: &TaskGraph, options: &StepOptions) -> Result<TrainingStep> {
    if !(options.backward_factor.is_finite() && options.backward_factor >= 0.0) {
        return Err(GraphError::InvalidOption { what: "backward_factor", value: options.backward_factor.to_string(), expected: "a finite number ≥ 0".into() });
    }
    let parameters = parameters(forward)?;
    let n = forward.len();
    // Which forward nodes compute from a parameter: readers and their descendants.
    let mut differentiable = vec![false; n];
    for p in &parameters {
        for &r in &p.readers {
            differentiable[r] = true;
        }
    }
    for &v in forward.topological_order() {
        if forward.predecessors(v).iter().any(|&u| differentiable[u]) {
            differentiable[v] = true;
        }
    }
    let bucket_of = match options.buckets {
        Some((first, rest)) => {
            if first == 0 || rest == 0 {
                return Err(GraphError::InvalidOption { what: "the bucket sizes", value: format!("{first} and {rest} bytes"), expected: "bucket sizes of at least one byte".into() });
            }
            let inputs: Vec<Option<(usize, &str)>> = parameters.iter().map(|p| Some((p.bytes, p.dtype.as_str()))).collect();
            buckets(&inputs, first, rest)
        }
        None => vec![None; parameters.len()],
    };
    let bucket_list: Vec<(Vec<usize>, usize)> = bucket_members(&bucket_of)
        .0
        .into_iter()
        .map(|members| {
            let bytes = members.iter().map(|&p| parameters[p].bytes).sum();
            (members, bytes)
        })
        .collect();
    let bucket_count = bucket_list.len();

    let base = forward.nodes().iter().map(|node| node.id).max().map_or(0, |m| m + 1);
    let loss = base;
    let backward_id = |v: usize| base + 1 + v as u64;
    let collective_id = |b: usize| base + 1 + n as u64 + b as u64;
    let optimizer_id = |b: usize| base + 1 + n as u64 + bucket_count as u64 + b as u64;
    let optimizer_count = bucket_count.max(1);

    let mut builder = TaskGraphBuilder::new();
    for node in forward.nodes() {
        let mut node = node.clone();
        node.attrs.insert("phase".into(), json!("forward"));
        builder.add_node(node)?;
    }
    for (u, v) in forward.edges() {
        builder.add_edge(forward.id_of(u), forward.id_of(v))?;
    }
    let mut loss_node = Node::new(loss, "loss");
    loss_node.attrs.insert("phase".into(), json!("loss"));
    builder.add_node(loss_node)?;
    for v in (0..n).filter(|&v| forward.successors(v).is_empty()) {
        builder.add_edge(forward.id_of(v), loss)?;
    }
    for v in (0..n).filter(|&v| differentiable[v]) {
        let node = forward.node(v);
        let mut backward = Node::new(backward_id(v), format!("{}:backward", node.op));
        backward.duration_us = node.duration_us.map(|d| d * options.backward_factor);
        backward.attrs.insert("phase".into(), json!("backward"));
        backward.attrs.insert("forward".into(), json!(node.id));
        builder.add_node(backward)?;
        builder.add_edge(loss, backward_id(v))?;
        for &w in forward.successors(v) {
            if differentiable[w] {
                builder.add_edge(backward_id(w), backward_id(v))?;
            }
        }
    }
    for (b, (members, bytes)) in bucket_list.iter().enumerate() {
        let mut collective = Node::new(collective_id(b), "nccl:all_reduce");
        collective.attrs.insert("phase".into(), json!("collective"));
        collective.attrs.insert("stream_class".into(), json!(COLLECTIVE_CLASS));
        collective.attrs.insert("bucket".into(), json!(b));
        collective.attrs.insert("bytes".into(), json!(bytes));
        builder.add_node(collective)?;
        if b > 0 {
            builder.add_edge(collective_id(b - 1), collective_id(b))?;
        }
        for &p in members {
            for &r in &parameters[p].readers {
                builder.add_edge(backward_id(r), collective_id(b))?;
            }
        }
    }
    for b in 0..optimizer_count {
        let mut optimizer = Node::new(optimizer_id(b), "optimizer");
        optimizer.attrs.insert("phase".into(), json!("optimizer"));
        if bucket_count > 0 {
            optimizer.attrs.insert("bucket".into(), json!(b));
        }
        builder.add_node(optimizer)?;
        if bucket_count > 0 {
            builder.add_edge(collective_id(b), optimizer_id(b))?;
        }
        for p in &parameters {
            for &r in &p.readers {
                builder.add_edge(backward_id(r), optimizer_id(b))?;
            }
        }
    }
    let graph = builder.build()?;
    let index = |id: u64| graph.index_of(id).expect("the builder added it");
    let collectives = (0..bucket_count).map(|b| index(collective_id(b))).collect();
    let optimizers = (0..optimizer_count).map(|b| index(optimizer_id(b))).collect();
    Ok(TrainingStep { graph, parameters, buckets: bucket_list, collectives, optimizers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_take_parameters_in_reverse_and_close_at_the_size_or_a_dtype_change() {
        let f = Some((4usize, 'f'));
        let h = Some((2usize, 'h'));
        // Reverse order: 5, 4 (bucket 0 reaches 8 bytes), 3 (no gradient), 2, 1 (bucket 1), 0 (half).
        let params = [h, f, f, None, f, f];
        assert_eq!(buckets(&params, 8, 8), vec![Some(2), Some(1), Some(1), None, Some(0), Some(0)]);
        // A bucket closes after the parameter that fills it, however large.
        assert_eq!(buckets(&[f, Some((100, 'f')), f], 8, 8), vec![Some(1), Some(0), Some(0)]);
        assert_eq!(buckets(&[f, f, f], usize::MAX, usize::MAX), vec![Some(0); 3]);
        assert!(buckets::<char>(&[None, None], 8, 8).iter().all(Option::is_none));
        // A small first bucket (the last parameters), then large ones.
        assert_eq!(buckets(&[f, f, f, f, f], 4, 12), vec![Some(2), Some(1), Some(1), Some(1), Some(0)]);
    }

    #[test]
    fn bucket_members_list_each_bucket_in_order_and_the_rest() {
        let (members, rest) = bucket_members(&[Some(1), None, Some(0), Some(1), Some(0)]);
        assert_eq!(members, vec![vec![2, 4], vec![0, 3]]);
        assert_eq!(rest, vec![1]);
        assert_eq!(bucket_members(&[None, None]), (Vec::<Vec<usize>>::new(), vec![0, 1]));
    }

    fn param(index: usize, bytes: usize) -> Value {
        json!({"index": index, "bytes": bytes, "dtype": "Float"})
    }

    /// x -> conv0(w0) -> relu -> conv1(w1) -> add(relu) -> fc(w2, w3); `ids` start at 10.
    fn forward() -> TaskGraph {
        let mut b = TaskGraphBuilder::new();
        let mut add = |id: u64, op: &str, params: Vec<Value>| {
            let mut node = Node::new(id, op).with_duration(10.0);
            if !params.is_empty() {
                node.attrs.insert("params".into(), Value::Array(params));
            }
            b.add_node(node).unwrap();
        };
        add(10, "aten::copy_", vec![]);
        add(11, "aten::conv2d", vec![param(0, 400)]);
        add(12, "aten::relu", vec![]);
        add(13, "aten::conv2d", vec![param(1, 400)]);
        add(14, "aten::add", vec![]);
        add(15, "aten::linear", vec![param(2, 800), param(3, 8)]);
        for (u, v) in [(10, 11), (11, 12), (12, 13), (13, 14), (12, 14), (14, 15)] {
            b.add_edge(u, v).unwrap();
        }
        b.build().unwrap()
    }

    #[test]
    fn the_backward_mirrors_the_forward_and_collectives_sit_between_gradients_and_the_optimizer() {
        let forward = forward();
        let step = training_step(&forward, &StepOptions { buckets: Some((16, 800)), backward_factor: 2.0 }).unwrap();
        let g = &step.graph;
        // Forward 6, loss, 5 backward nodes (the input copy has none), 2 buckets, an update each.
        assert_eq!(g.len(), 6 + 1 + 5 + 2 + 2);
        assert_eq!(step.parameters.iter().map(|p| p.bytes).collect::<Vec<_>>(), vec![400, 400, 800, 8]);
        // Reverse order: w3 (8 < 16 keeps it open), w2 (808: full); w1, w0 (800: full).
        assert_eq!(step.buckets, vec![(vec![2, 3], 808), (vec![0, 1], 800)]);
        let reach = g.reachability();
        let node = |id: u64| g.index_of(id).unwrap();
        let reaches = |a: u64, b: u64| reach.reaches(node(a), node(b));
        // ids: loss 16, backward 17 + index, collectives 23.., optimizer nodes after them.
        assert_eq!(g.node(node(16)).op, "loss");
        assert!(g.index_of(17).is_none(), "the input copy has no backward");
        assert_eq!(g.node(node(22)).op, "aten::linear:backward");
        assert_eq!(g.node(node(22)).duration_us, Some(20.0));
        // relu's backward waits for both its consumers' (conv1's and add's).
        assert!(reaches(20, 19) && reaches(21, 19));
        // The first bucket (fc's parameters) needs only fc's backward: it overlaps the rest.
        let first = step.collectives[0];
        assert!(reaches(22, g.id_of(first)));
        assert!(reach.independent(node(18), first), "bucket 0 runs beside conv0's backward");
        for c in &step.collectives {
            assert_eq!(g.node(*c).attrs["stream_class"], json!(COLLECTIVE_CLASS));
        }
        // One update per bucket, after its all-reduce and the whole backward, not after later
        // buckets' all-reduces.
        assert_eq!(step.optimizers.len(), 2);
        for (b, &o) in step.optimizers.iter().enumerate() {
            assert_eq!(g.node(o).attrs["bucket"], json!(b));
            assert!(reach.reaches(step.collectives[b], o));
            assert!(reach.reaches(node(18), o) && reach.reaches(node(22), o), "the backward is over first");
        }
        assert!(reach.independent(step.collectives[1], step.optimizers[0]), "bucket 0's update runs beside bucket 1's all-reduce");
        for pair in step.collectives.windows(2) {
            assert!(reach.reaches(pair[0], pair[1]), "buckets are issued in order");
        }
        assert!(g.node(first).duration_us.is_none(), "the caller prices collectives");
    }

    #[test]
    fn one_gpu_has_no_collectives_and_bad_params_are_named() {
        let step = training_step(&forward(), &StepOptions::single_gpu()).unwrap();
        assert!(step.collectives.is_empty() && step.buckets.is_empty());
        assert_eq!(step.graph.len(), 6 + 1 + 5 + 1);
        assert_eq!(step.optimizers.len(), 1);
        assert!(step.graph.reachability().reaches(step.graph.index_of(18).unwrap(), step.optimizers[0]));

        let with = |attr: Value| {
            let mut b = TaskGraphBuilder::new();
            let mut node = Node::new(3, "aten::conv2d");
            node.attrs.insert("params".into(), attr);
            b.add_node(node).unwrap();
            training_step(&b.build().unwrap(), &StepOptions::data_parallel()).unwrap_err().to_string()
        };
        assert!(with(json!(5)).contains("node 3: params is 5"));
        assert!(with(json!([{"index": 0}])).contains("node 3: params"));
        let gap = with(json!([param(1, 4)]));
        assert!(gap.contains("missing parameter 0 (no node reads it)") && !gap.contains("node 0:"), "{gap}");
        let mut b = TaskGraphBuilder::new();
        for (id, bytes) in [(1, 4), (2, 8)] {
            let mut node = Node::new(id, "aten::linear");
            node.attrs.insert("params".into(), json!([param(0, bytes)]));
            b.add_node(node).unwrap();
        }
        let tied = training_step(&b.build().unwrap(), &StepOptions::data_parallel()).unwrap_err().to_string();
        assert!(tied.contains("node 2"), "{tied}");
        let bad = training_step(&forward(), &StepOptions { buckets: Some((0, 1)), backward_factor: 2.0 }).unwrap_err().to_string();
        assert!(bad.contains("at least one byte"), "{bad}");
        let bad = training_step(&forward(), &StepOptions { buckets: None, backward_factor: f64::NAN }).unwrap_err().to_string();
        assert!(bad.contains("backward_factor"), "{bad}");
    }
}
