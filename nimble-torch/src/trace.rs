//! Recording a forward's top-level ATen ops, and the dependencies between them.
//!
//! The shim's RecordFunction callback sees every op libtorch's dispatcher runs on this thread;
//! the outermost ones (nesting depth 1) are the forward's tasks. Each records the storages its
//! tensors live in, and which of them it writes (from the op schema's alias annotations,
//! `Tensor(a!)`). Dependencies follow from storage identity: an op depends on the last writer
//! of every storage it reads (read-after-write), and an op that writes a storage also depends
//! on the last writer (write-after-write) and on every reader since (write-after-read). Views
//! share their base's storage, so in-place ops on views order correctly too.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use nimble_graph::{Node, TaskGraph, TaskGraphBuilder};
use serde_json::json;

use crate::error::{NimbleError, Result};
use crate::ffi;

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorDevice {
    Cpu,
    Cuda,
    /// Meta, MPS and the like.
    Other,
}

/// One tensor argument or result of an op.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorUse {
    /// Storage identity within the trace (views share their base's).
    pub storage: u64,
    /// The op writes this argument (in place or as an `out=` argument).
    pub write: bool,
    pub device: TensorDevice,
    /// libtorch's name of the element type (`Float`, `Long`, …).
    pub dtype: String,
    pub shape: Vec<i64>,
}

/// One top-level op of a forward.
#[derive(Clone, Debug, PartialEq)]
pub struct TracedOp {
    /// The ATen op, e.g. `aten::conv2d`.
    pub name: String,
    /// The op's schema was found, so `write` flags are exact. Without it, every result that
    /// aliases an earlier tensor counts as a write.
    pub has_schema: bool,
    pub inputs: Vec<TensorUse>,
    pub outputs: Vec<TensorUse>,
    /// The host-synchronizing op run by this one (itself or a nested op), if any.
    pub host_sync: Option<String>,
}

impl TracedOp {
    /// The op touches a CUDA tensor (so it may launch GPU work).
    pub fn touches_cuda(&self) -> bool {
        self.inputs.iter().chain(&self.outputs).any(|u| u.device == TensorDevice::Cuda)
    }
}

/// A parameter the forward read (a leaf that requires gradients), recorded when the trace keeps
/// state (training).
#[derive(Clone, Debug, PartialEq)]
pub struct TracedParam {
    /// Storage identity within the trace.
    pub storage: u64,
    pub bytes: usize,
    /// libtorch's name of the element type.
    pub dtype: String,
}

/// The recorded top-level ops of one forward, in issue order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    pub ops: Vec<TracedOp>,
    /// The parameters, in order of first use (empty unless the trace kept state).
    pub params: Vec<TracedParam>,
}

/// Runs `body` while recording its top-level ops. A panic in `body` (tch turns libtorch errors
/// into panics) becomes [`NimbleError::ForwardFailed`]; the recording is always stopped.
pub fn record<T>(body: impl FnOnce() -> T) -> Result<(Trace, T)> {
    let (trace, value, _) = record_inner(false, body)?;
    Ok((trace, value))
}

/// Like [`record`], also collecting the forward's parameters and external tensors with their
/// values before the forward (for training, which must leave them as it found them).
pub(crate) fn record_with_state<T>(body: impl FnOnce() -> T) -> Result<(Trace, T, ffi::ExternalState)> {
    record_inner(true, body)
}

fn record_inner<T>(keep_state: bool, body: impl FnOnce() -> T) -> Result<(Trace, T, ffi::ExternalState)> {
    ffi::trace_begin(keep_state)?;
    let value = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(panic) => {
            ffi::trace_abandon();
            return Err(NimbleError::ForwardFailed { pass: "trace", message: panic_message(&panic) });
        }
    };
    let (text, state) = ffi::trace_end()?;
    Ok((Trace::parse(&text)?, value, state))
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    let text = if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = panic.downcast_ref::<&str>() {
        s.to_string()
    } else {
        "a panic without a message".to_string()
    };
    // tch's panics carry libtorch's whole backtrace; its first lines say what happened.
    text.lines().take(3).collect::<Vec<_>>().join(" ")
}

impl Trace {
    /// Parses the shim's trace text (format documented in `shim/nimble_shim.cpp`).
    pub(crate) fn parse(text: &str) -> Result<Trace> {
        let bad = |line: &str| NimbleError::Internal(format!("malformed trace line `{line}`"));
        let mut ops: Vec<TracedOp> = Vec::new();
        let mut params = Vec::new();
        for line in text.lines() {
            let fields: Vec<&str> = line.split('\t').collect();
            match fields[0] {
                "param" if fields.len() == 4 => params.push(TracedParam {
                    storage: fields[1].parse().map_err(|_| bad(line))?,
                    bytes: fields[2].parse().map_err(|_| bad(line))?,
                    dtype: fields[3].to_string(),
                }),
                "op" if fields.len() == 4 => ops.push(TracedOp {
                    name: fields[1].to_string(),
                    has_schema: fields[2] == "1",
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    host_sync: (fields[3] != "-").then(|| fields[3].to_string()),
                }),
                kind @ ("in" | "out") if fields.len() == 6 => {
                    let op = ops.last_mut().ok_or_else(|| bad(line))?;
                    let shape = if fields[5].is_empty() {
                        Vec::new()
                    } else {
                        fields[5].split(',').map(|d| d.parse().map_err(|_| bad(line))).collect::<Result<_>>()?
                    };
                    let use_ = TensorUse {
                        storage: fields[1].parse().map_err(|_| bad(line))?,
                        write: fields[2] == "1",
                        device: match fields[3] {
                            "0" => TensorDevice::Cpu,
                            "1" => TensorDevice::Cuda,
                            _ => TensorDevice::Other,
                        },
                        dtype: fields[4].to_string(),
                        shape,
                    };
                    if kind == "in" {
                        op.inputs.push(use_);
                    } else {
                        op.outputs.push(use_);
                    }
                }
                _ => return Err(bad(line)),
            }
        }
        Ok(Trace { ops, params })
    }

    /// Number of recorded ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// No op was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The forward touched CUDA tensors.
    pub fn is_cuda(&self) -> bool {
        self.ops.iter().any(TracedOp::touches_cuda)
    }

    /// The first op that synchronizes with the host, as (index, op).
    pub fn first_host_sync(&self) -> Option<(usize, &TracedOp)> {
        self.ops.iter().enumerate().find(|(_, op)| op.host_sync.is_some())
    }

    /// The ops that become task-graph nodes: those that write something (a fresh result or
    /// an argument in place), and on a CUDA forward only those touching a CUDA tensor. Left
    /// out are views and shape queries (`view`, `flatten`, `size`, …: metadata on the host,
    /// no GPU work) and, on a CUDA forward, ops on CPU tensors alone. Leaving them out loses no
    /// ordering: they write nothing, and dependencies follow storages, so a view's consumers
    /// already depend on the op that wrote the viewed storage.
    pub fn task_ops(&self) -> Vec<usize> {
        let cuda = self.is_cuda();
        self.accesses()
            .iter()
            .enumerate()
            .filter(|(k, (_, writes))| !writes.is_empty() && (!cuda || self.ops[*k].touches_cuda()))
            .map(|(k, _)| k)
            .collect()
    }

    /// The storages each op reads and writes.
    fn accesses(&self) -> Vec<(Vec<u64>, Vec<u64>)> {
        let mut seen: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let mut result = Vec::with_capacity(self.ops.len());
        for op in &self.ops {
            let mut reads: Vec<u64> = op.inputs.iter().map(|u| u.storage).collect();
            let mut writes: Vec<u64> = op.inputs.iter().filter(|u| u.write).map(|u| u.storage).collect();
            for out in &op.outputs {
                let is_input = op.inputs.iter().any(|u| u.storage == out.storage);
                let fresh = !is_input && !seen.contains(&out.storage);
                // A fresh result is written by the op. A result aliasing an argument is a view
                // or the in-place target (already flagged from the schema); without a schema we
                // cannot tell, so it counts as a write. A result aliasing an older tensor that is
                // no argument is unusual: count it as a write, which only adds ordering.
                if fresh || !op.has_schema || !is_input {
                    writes.push(out.storage);
                }
            }
            for u in op.inputs.iter().chain(&op.outputs) {
                seen.insert(u.storage);
            }
            reads.sort_unstable();
            reads.dedup();
            writes.sort_unstable();
            writes.dedup();
            result.push((reads, writes));
        }
        result
    }

    /// Predecessors of each op (sorted, no duplicates): read-after-write, write-after-write and
    /// write-after-read through shared storages.
    pub fn dependencies(&self) -> Vec<Vec<usize>> {
        let mut last_writer: HashMap<u64, usize> = HashMap::new();
        let mut readers: HashMap<u64, Vec<usize>> = HashMap::new();
        let mut predecessors = vec![Vec::new(); self.ops.len()];
        for (k, (reads, writes)) in self.accesses().into_iter().enumerate() {
            let preds = &mut predecessors[k];
            for s in &reads {
                preds.extend(last_writer.get(s));
            }
            for s in &writes {
                preds.extend(last_writer.get(s));
                if let Some(rs) = readers.get(s) {
                    preds.extend(rs.iter().copied());
                }
            }
            preds.retain(|&p| p != k);
            preds.sort_unstable();
            preds.dedup();
            for s in reads {
                readers.entry(s).or_default().push(k);
            }
            for s in writes {
                last_writer.insert(s, k);
                readers.insert(s, Vec::new());
            }
        }
        predecessors
    }

    /// The forward as a task graph: one node per task op (see [`Trace::task_ops`]) with id =
    /// its position in the trace, its op name and result shapes, and the parameters it reads
    /// (attribute `params`, as [`nimble_graph::step`] reads them); edges from
    /// [`Trace::dependencies`]. Measured times go in with `TaskGraph::with_durations`.
    pub fn task_graph(&self) -> Result<TaskGraph> {
        let tasks = self.task_ops();
        let mut is_task = vec![false; self.ops.len()];
        for &k in &tasks {
            is_task[k] = true;
        }
        let mut builder = TaskGraphBuilder::new();
        for &k in &tasks {
            let op = &self.ops[k];
            let mut node = Node::new(k as u64, op.name.clone());
            node.shapes = Some(op.outputs.iter().map(|u| u.shape.clone()).collect());
            node.attrs.insert("input_shapes".into(), json!(op.inputs.iter().map(|u| &u.shape).collect::<Vec<_>>()));
            let params: Vec<_> = self
                .params
                .iter()
                .enumerate()
                .filter(|(_, p)| op.inputs.iter().any(|u| u.storage == p.storage))
                .map(|(index, p)| json!({"index": index, "bytes": p.bytes, "dtype": p.dtype}))
                .collect();
            if !params.is_empty() {
                node.attrs.insert("params".into(), json!(params));
            }
            builder.add_node(node)?;
        }
        for (k, preds) in self.dependencies().iter().enumerate() {
            if !is_task[k] {
                continue;
            }
            for &p in preds {
                // An op left out writes nothing (so nothing depends on it through a storage) or
                // works on the CPU alone (feeding a CUDA op would need a host-device copy, a host
                // sync, refused before scheduling): dropping its edges loses no ordering.
                if is_task[p] {
                    builder.add_edge(p as u64, k as u64)?;
                }
            }
        }
        Ok(builder.build()?)
    }

    /// Op counts by name, most frequent first.
    pub fn op_histogram(&self) -> Vec<(String, usize)> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for op in &self.ops {
            *counts.entry(op.name.as_str()).or_default() += 1;
        }
        let mut list: Vec<(String, usize)> = counts.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        list.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn use_(storage: u64, write: bool) -> TensorUse {
        TensorUse { storage, write, device: TensorDevice::Cuda, dtype: "Float".into(), shape: vec![1] }
    }
    fn op(name: &str, inputs: Vec<TensorUse>, outputs: Vec<TensorUse>) -> TracedOp {
        TracedOp { name: name.into(), has_schema: true, inputs, outputs, host_sync: None }
    }

    #[test]
    fn read_after_write_and_in_place_orderings() {
        // 0: a = conv(x)   1: b = view(a)   2: c = sigmoid(a)   3: relu_(b)   4: d = add(a, c)
        let trace = Trace {
            ops: vec![
                op("aten::conv2d", vec![use_(0, false)], vec![use_(1, false)]),
                op("aten::view", vec![use_(1, false)], vec![use_(1, false)]),
                op("aten::sigmoid", vec![use_(1, false)], vec![use_(2, false)]),
                op("aten::relu_", vec![use_(1, true)], vec![use_(1, false)]),
                op("aten::add", vec![use_(1, false), use_(2, false)], vec![use_(3, false)]),
            ],
            params: Vec::new(),
        };
        let deps = trace.dependencies();
        assert_eq!(deps[0], Vec::<usize>::new());
        assert_eq!(deps[1], vec![0], "a view reads its base");
        assert_eq!(deps[2], vec![0], "the view is no write: sigmoid needs only the conv");
        assert_eq!(deps[3], vec![0, 1, 2], "in place: after the writer and every reader since");
        assert_eq!(deps[4], vec![2, 3], "reads the in-place result and sigmoid's");
    }

    #[test]
    fn results_without_a_schema_that_alias_count_as_writes() {
        let mut unknown = op("custom::alias", vec![use_(1, false)], vec![use_(1, false)]);
        unknown.has_schema = false;
        let trace = Trace {
            ops: vec![
                op("aten::conv2d", vec![use_(0, false)], vec![use_(1, false)]),
                op("aten::relu", vec![use_(1, false)], vec![use_(2, false)]),
                unknown,
            ],
            params: Vec::new(),
        };
        assert_eq!(trace.dependencies()[2], vec![0, 1]);
    }

    #[test]
    fn cpu_only_ops_are_left_out_of_a_cuda_graph() {
        let mut cpu = op("aten::arange", vec![], vec![use_(5, false)]);
        cpu.outputs[0].device = TensorDevice::Cpu;
        let trace = Trace {
            ops: vec![op("aten::relu", vec![use_(0, false)], vec![use_(1, false)]), cpu, op("aten::neg", vec![use_(1, false)], vec![use_(2, false)])],
            params: Vec::new(),
        };
        assert_eq!(trace.task_ops(), vec![0, 2]);
        let durations = [1.0, 2.0, 3.0];
        let graph = trace.task_graph().unwrap().with_durations(|_, node| Some(durations[node.id as usize]));
        assert_eq!(graph.len(), 2);
        assert_eq!(graph.edge_count(), 1);
        assert_eq!(graph.node(1).id, 2);
        assert_eq!(graph.node(1).duration_us, Some(3.0));
    }

    #[test]
    fn parse_round_trips_the_shim_format() {
        let text = "op\taten::add_\t1\t-\nin\t3\t1\t1\tFloat\t1,64\nin\t4\t0\t0\tFloat\t\nout\t3\t0\t1\tFloat\t1,64\nop\taten::item\t1\taten::_local_scalar_dense\nparam\t3\t256\tFloat\n";
        let trace = Trace::parse(text).unwrap();
        assert_eq!(trace.params, vec![TracedParam { storage: 3, bytes: 256, dtype: "Float".into() }]);
        assert_eq!(trace.task_graph().unwrap().node(0).attrs["params"], json!([{"index": 0, "bytes": 256, "dtype": "Float"}]));
        assert!(Trace::parse("param\t1\tmany\tFloat\n").is_err());
        assert_eq!(trace.len(), 2);
        assert_eq!(trace.ops[0].inputs[0], TensorUse { storage: 3, write: true, device: TensorDevice::Cuda, dtype: "Float".into(), shape: vec![1, 64] });
        assert_eq!(trace.ops[0].inputs[1].shape, Vec::<i64>::new());
        assert_eq!(trace.first_host_sync().unwrap().0, 1);
        assert!(Trace::parse("in\t1\t0\t0\tFloat\t1\n").is_err(), "a tensor before any op");
        assert!(Trace::parse("op\tx\n").is_err());
    }
}
