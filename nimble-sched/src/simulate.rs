//! A discrete-event model of one GPU running a [`StreamPlan`], eagerly or as one CUDA graph.
//!
//! # The model
//! * **Host.** In [`LaunchMode::Eager`] the host forks the plan's streams from an origin stream
//!   (one event record and one wait per stream), walks the issue order paying `eager_launch_us`
//!   per kernel and `eager_event_us` per event wait before a kernel and per event record after a
//!   sync source, then joins every stream back (a record and a wait per stream); a kernel
//!   cannot start before its launch call returns, and the run cannot end before the join is
//!   issued. In [`LaunchMode::Graph`] the whole plan is available to the GPU
//!   `graph_launch_us + graph_branch_us × streams` after the launch call starts.
//! * **Dependencies.** A node starts a latency after the last of its stream predecessor and the
//!   sources of its syncs finishes: `graph_dependency_latency_us` for every edge of a graph
//!   (`graph_sync_latency_us` instead for an edge between streams, when set);
//!   in eager mode `eager_dependency_latency_us` after the stream predecessor and
//!   `eager_sync_latency_us` after a sync source. (The GPU enforces the plan, not the task
//!   graph, so a wrong plan shows wrong timing rather than an error.)
//! * **Dispatch.** The GPU front end starts at most one node per `dispatch_us`.
//! * **Capacity.** At most `max_concurrent_kernels` kernels run at once, and running kernels
//!   share the GPU: each has a share (node attribute `sm_share` in (0, 1], else
//!   `default_sm_share`, and at least `min_sm_share`; 0 means "takes nothing") and, while the
//!   running shares add up to more than 1, every running kernel slows down by that sum.
//! * **Kernels** run for their `duration_us` (else `default_duration_us`) once started, longer
//!   when slowed down by sharing.
//!
//! Ready nodes start in order of the time they became ready, ties by issue order.
//!
//! # Defaults and where they come from
//! Fitted by `nimble-bench calibrate-simulator` to the runs in
//! `paper-figs/results/simulator-validation.json`: 181 measured runs of `nimble-cuda`'s
//! synthetic executor (chains, fans of 2–128 branches, NASNet-like cells, random layered DAGs of
//! 1k–10k nodes, a DNN-like graph, and zero-duration chains and fans) under every registered
//! algorithm, on an NVIDIA H200 (driver 580.159.04, CUDA 13.0), 2026-11-21. On that GPU an eager
//! launch costs the host about 2.7 µs, and a graph node about 0.7 µs along a dependent chain and
//! 0.17 µs across parallel branches; an event wait between streams adds about 3.3 µs of GPU-side
//! latency in eager mode against 1.6 µs between kernels of one stream. The GPU does not wait for the host-side cost of launching a
//! wide graph (about 1 µs per branch, measured separately), so `graph_branch_us` fits to
//! 0.013 µs. Recalibrate for another GPU with `nimble-bench validate-simulator` then
//! `calibrate-simulator`. PyTorch's eager overhead per op is about 12 µs; set `eager_launch_us`
//! to that to model framework eager mode.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use nimble_graph::TaskGraph;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::SchedError;
use crate::plan::StreamPlan;

/// The largest latency or host cost a parameter may have, µs (a second: far beyond any GPU's).
pub const MAX_LATENCY_US: f64 = 1e6;
/// The most kernels the simulator may run at once.
pub const MAX_CONCURRENT_KERNELS: usize = 1_000_000;

/// How the plan is launched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LaunchMode {
    /// Kernel by kernel from the host, with events for syncs.
    Eager,
    /// One CUDA-graph launch of the whole plan.
    Graph,
}

impl LaunchMode {
    /// The mode's name as the CLI and the records spell it: `eager` or `graph`.
    pub fn name(self) -> &'static str {
        match self {
            LaunchMode::Eager => "eager",
            LaunchMode::Graph => "graph",
        }
    }
}

/// Parameters of the model; see the [module documentation](self).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SimulatorConfig {
    pub mode: LaunchMode,
    pub eager_launch_us: f64,
    pub eager_event_us: f64,
    pub eager_dependency_latency_us: f64,
    pub eager_sync_latency_us: f64,
    pub graph_launch_us: f64,
    pub graph_branch_us: f64,
    pub graph_dependency_latency_us: f64,
    /// Graph mode: the latency of a dependency between streams (a sync), when it differs from
    /// `graph_dependency_latency_us` (`None`: the same).
    #[serde(default)]
    pub graph_sync_latency_us: Option<f64>,
    pub dispatch_us: f64,
    pub max_concurrent_kernels: usize,
    pub default_duration_us: f64,
    pub default_sm_share: f64,
    /// The least share of the GPU a running kernel takes, whatever its grid (0: none): how
    /// concurrent small kernels still slow each other (memory, caches, schedulers).
    #[serde(default)]
    pub min_sm_share: f64,
}

impl SimulatorConfig {
    /// Calibrated defaults for graph launch (H200; see the module documentation).
    pub fn graph() -> Self {
        SimulatorConfig {
            mode: LaunchMode::Graph,
            eager_launch_us: 2.7,
            eager_event_us: 0.28,
            eager_dependency_latency_us: 1.6,
            eager_sync_latency_us: 3.3,
            graph_launch_us: 4.8,
            graph_branch_us: 0.013,
            graph_dependency_latency_us: 0.7,
            graph_sync_latency_us: None,
            dispatch_us: 0.17,
            max_concurrent_kernels: 128,
            default_duration_us: 0.0,
            default_sm_share: 0.0,
            min_sm_share: 0.0,
        }
    }

    /// Graph launch of a kernel-timed task graph (a real model's, each op's `duration_us` the
    /// time of its own kernels in a profiled one-stream replay, with `kernels` and `sm_share`
    /// attributes: `Nimble::kernel_timed_graph`). Fitted to every zoo model under every
    /// registered algorithm measured on an H200 (`paper-figs/results/model-graphs/`, the
    /// record `schedulers.json` beside it), when op times were their kernels' spans: a
    /// dependency costs less than between the synthetic executor's kernels (0.4 µs, 0.8 µs
    /// between streams), and concurrent kernels slow each other down even when their grids are
    /// small (each takes at least 0.35 of the GPU). Fitted on half of the models, the other
    /// half's median error was 2.6–3.2%. On graphs timed by their kernels' union instead, no
    /// other point of a grid did better on both the zoo and the coverage set
    /// (`paper-figs/results/simulator/kernel-timed-calibration-grid-894d118.txt`).
    pub fn kernel_timed() -> Self {
        SimulatorConfig { graph_dependency_latency_us: 0.4, graph_sync_latency_us: Some(0.8), min_sm_share: 0.35, ..Self::graph() }
    }

    /// The defaults for `mode` on `graph`: [`SimulatorConfig::kernel_timed`] in graph mode for
    /// a kernel-timed graph (every node has a `kernels` attribute), else [`for_mode`](Self::for_mode).
    pub fn for_graph(mode: LaunchMode, graph: &TaskGraph) -> Self {
        let kernel_timed = !graph.is_empty() && graph.nodes().iter().all(|n| n.attrs.contains_key("kernels"));
        match mode {
            LaunchMode::Graph if kernel_timed => Self::kernel_timed(),
            _ => Self::for_mode(mode),
        }
    }

    /// The same defaults with eager launch.
    pub fn eager() -> Self {
        SimulatorConfig { mode: LaunchMode::Eager, ..Self::graph() }
    }

    /// The defaults for `mode`.
    pub fn for_mode(mode: LaunchMode) -> Self {
        match mode {
            LaunchMode::Graph => Self::graph(),
            LaunchMode::Eager => Self::eager(),
        }
    }

    /// Which calibration these parameters are, as every output names it: `kernel-timed-h200`
    /// ([`kernel_timed`](Self::kernel_timed)), `synthetic-h200` ([`graph`](Self::graph) or
    /// [`eager`](Self::eager)), or `custom` (anything changed by hand).
    pub fn calibration(&self) -> &'static str {
        let mut as_graph = self.clone();
        as_graph.mode = LaunchMode::Graph;
        if as_graph == Self::kernel_timed() {
            "kernel-timed-h200"
        } else if as_graph == Self::graph() {
            "synthetic-h200"
        } else {
            "custom"
        }
    }

    /// Checks every parameter against its range (documented in docs/cli.md, Limits):
    /// latencies and host costs finite in [0, 1e6] µs, `default_duration_us` in [0, 1e9] µs
    /// (a task's own limit), shares in [0, 1], `max_concurrent_kernels` in [1, 1e6]. Parameters
    /// outside them would give infinite or meaningless makespans.
    pub fn validate(&self) -> Result<(), SchedError> {
        let microseconds = [
            ("eager_launch_us", self.eager_launch_us),
            ("eager_event_us", self.eager_event_us),
            ("eager_dependency_latency_us", self.eager_dependency_latency_us),
            ("eager_sync_latency_us", self.eager_sync_latency_us),
            ("graph_launch_us", self.graph_launch_us),
            ("graph_branch_us", self.graph_branch_us),
            ("graph_dependency_latency_us", self.graph_dependency_latency_us),
            ("graph_sync_latency_us", self.graph_sync_latency_us.unwrap_or(0.0)),
            ("dispatch_us", self.dispatch_us),
        ];
        let bad = |parameter: &str, value: String, expected: &str| SchedError::InvalidSimulatorParameter { parameter: parameter.to_string(), value, expected: expected.to_string() };
        for (name, value) in microseconds {
            if !(0.0..=MAX_LATENCY_US).contains(&value) {
                return Err(bad(name, nimble_graph::compact(value), "a number of µs in [0, 1e6]"));
            }
        }
        if !(0.0..=nimble_graph::MAX_DURATION_US).contains(&self.default_duration_us) {
            return Err(bad("default_duration_us", nimble_graph::compact(self.default_duration_us), "a number of µs in [0, 1e9]"));
        }
        for (name, value) in [("default_sm_share", self.default_sm_share), ("min_sm_share", self.min_sm_share)] {
            if !(0.0..=1.0).contains(&value) {
                return Err(bad(name, nimble_graph::compact(value), "a share of the GPU in [0, 1]"));
            }
        }
        if !(1..=MAX_CONCURRENT_KERNELS).contains(&self.max_concurrent_kernels) {
            return Err(bad("max_concurrent_kernels", self.max_concurrent_kernels.to_string(), "a count in [1, 1000000]"));
        }
        Ok(())
    }
}

/// When one node ran.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Span {
    pub node: usize,
    pub stream: usize,
    pub start_us: f64,
    pub end_us: f64,
}

/// The outcome of a simulation.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Simulation {
    pub mode: LaunchMode,
    /// Time from the first host call to the end of the last kernel, µs.
    pub makespan_us: f64,
    /// When the host finished issuing (eager) or launching the graph, µs.
    pub host_end_us: f64,
    /// Time during which at least one kernel ran, µs.
    pub busy_us: f64,
    /// One span per node, by node index.
    pub spans: Vec<Span>,
    /// Host launch calls `(node, start, end)` in eager mode.
    pub host_launches: Vec<(usize, f64, f64)>,
}

/// An event-queue entry ordered by time, then by issue position.
#[derive(PartialEq)]
struct Timed {
    time: f64,
    tie: usize,
    node: usize,
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Self) -> Ordering {
        self.time.total_cmp(&other.time).then(self.tie.cmp(&other.tie))
    }
}

/// Simulates `plan` on `graph` under `config`.
///
/// # Complexity
/// O((V + S) log V) for S syncs.
///
/// # Panics
/// When the plan does not cover the graph's nodes (run [`verify`](crate::verify) on plans from
/// outside the registry first).
pub fn simulate(graph: &TaskGraph, plan: &StreamPlan, config: &SimulatorConfig) -> Simulation {
    let n = graph.len();
    assert_eq!(plan.stream_of.len(), n, "the plan must cover the graph");
    let mut position = vec![0; n];
    for (p, &v) in plan.order.iter().enumerate() {
        position[v] = p;
    }
    // What the GPU waits for: the stream predecessor and effective sync sources.
    let mut waits_for: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut sync_sources = vec![false; n];
    let mut last_on_stream = vec![None; plan.streams];
    for &v in &plan.order {
        if let Some(previous) = last_on_stream[plan.stream_of[v]].replace(v) {
            waits_for[v].push(previous);
        }
    }
    let mut wait_calls = vec![0usize; n];
    for &(u, v) in &plan.syncs {
        if position[u] < position[v] {
            waits_for[v].push(u);
            sync_sources[u] = true;
            wait_calls[v] += 1;
        }
    }

    // Host side: when each node may start at the earliest.
    let mut available = vec![0.0f64; n];
    let mut host_launches = Vec::new();
    let streams = plan.streams as f64;
    let host_end_us = match config.mode {
        LaunchMode::Eager => {
            let mut host = config.eager_event_us * (1.0 + streams); // fork
            for &v in &plan.order {
                host += config.eager_event_us * wait_calls[v] as f64;
                let start = host;
                host += config.eager_launch_us;
                host_launches.push((v, start, host));
                available[v] = host;
                if sync_sources[v] {
                    host += config.eager_event_us;
                }
            }
            host + config.eager_event_us * 2.0 * streams // join
        }
        LaunchMode::Graph => {
            let launched = config.graph_launch_us + config.graph_branch_us * streams;
            available.fill(launched);
            launched
        }
    };
    let (stream_latency, sync_latency) = match config.mode {
        LaunchMode::Eager => (config.eager_dependency_latency_us, config.eager_sync_latency_us),
        LaunchMode::Graph => (config.graph_dependency_latency_us, config.graph_sync_latency_us.unwrap_or(config.graph_dependency_latency_us)),
    };

    // (dependent, latency) per node: the stream predecessor comes first in `waits_for`.
    let mut dependents: Vec<Vec<(usize, f64)>> = vec![Vec::new(); n];
    let mut remaining: Vec<usize> = waits_for.iter().map(Vec::len).collect();
    for (v, sources) in waits_for.iter().enumerate() {
        for (i, &u) in sources.iter().enumerate() {
            let same_stream = i == 0 && plan.stream_of[u] == plan.stream_of[v];
            dependents[u].push((v, if same_stream { stream_latency } else { sync_latency }));
        }
    }
    let duration = |v: usize| graph.node(v).duration_us.unwrap_or(config.default_duration_us).max(0.0);
    let share = |v: usize| {
        let attribute = graph.node(v).attrs.get("sm_share").and_then(Value::as_f64);
        attribute.unwrap_or(config.default_sm_share).clamp(0.0, 1.0).max(config.min_sm_share)
    };

    let mut ready: BinaryHeap<Reverse<Timed>> = (0..n)
        .filter(|&v| remaining[v] == 0)
        .map(|v| Reverse(Timed { time: available[v], tie: position[v], node: v }))
        .collect();
    // Running kernels share the GPU: each progresses at 1 / max(1, the running shares' sum), so
    // every one advances along one virtual clock and finishes when it has run its duration on
    // it; `running` is ordered by that virtual finish.
    let mut running: BinaryHeap<Reverse<Timed>> = BinaryHeap::new();
    let mut running_share = 0.0;
    let (mut virtual_now, mut virtual_at) = (0.0f64, 0.0f64);
    let rate = |share: f64| 1.0 / share.max(1.0);
    let mut dispatcher_free = 0.0f64;
    // Time of the last finish processed: a node held back for capacity starts no earlier.
    let mut clock = 0.0f64;
    let mut spans = vec![Span { node: 0, stream: 0, start_us: 0.0, end_us: 0.0 }; n];

    loop {
        let next_start = ready.peek().map(|Reverse(t)| t.time.max(dispatcher_free).max(clock));
        let next_end = running.peek().map(|Reverse(t)| virtual_at + (t.time - virtual_now).max(0.0) / rate(running_share));
        let blocked = running.len() >= config.max_concurrent_kernels.max(1);
        let finish_first = match (next_start, next_end) {
            (None, None) => break,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (Some(start), Some(end)) => end <= start || blocked,
        };
        if finish_first {
            let Reverse(done) = running.pop().expect("a running kernel exists");
            let end = next_end.expect("a running kernel exists");
            (virtual_now, virtual_at) = (done.time.max(virtual_now), end);
            running_share = if running.is_empty() { 0.0 } else { running_share - share(done.node) };
            clock = end;
            spans[done.node].end_us = end;
            for &(w, latency) in &dependents[done.node] {
                available[w] = available[w].max(end + latency);
                remaining[w] -= 1;
                if remaining[w] == 0 {
                    ready.push(Reverse(Timed { time: available[w], tie: position[w], node: w }));
                }
            }
            continue;
        }
        let Reverse(next) = ready.pop().expect("a ready node exists");
        let start = next.time.max(dispatcher_free).max(clock).max(virtual_at);
        virtual_now += (start - virtual_at) * rate(running_share);
        virtual_at = start;
        dispatcher_free = start + config.dispatch_us;
        running_share += share(next.node);
        spans[next.node] = Span { node: next.node, stream: plan.stream_of[next.node], start_us: start, end_us: start };
        running.push(Reverse(Timed { time: virtual_now + duration(next.node), tie: position[next.node], node: next.node }));
    }

    let makespan_us = spans.iter().map(|s| s.end_us).fold(host_end_us, f64::max);
    Simulation { mode: config.mode, makespan_us, host_end_us, busy_us: busy_time(&spans), spans, host_launches }
}

/// Length of the union of the spans' intervals.
fn busy_time(spans: &[Span]) -> f64 {
    let mut intervals: Vec<(f64, f64)> = spans.iter().map(|s| (s.start_us, s.end_us)).collect();
    intervals.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut busy = 0.0;
    let mut current: Option<(f64, f64)> = None;
    for (start, end) in intervals {
        current = match current {
            Some((s, e)) if start <= e => Some((s, e.max(end))),
            Some((s, e)) => {
                busy += e - s;
                Some((start, end))
            }
            None => Some((start, end)),
        };
    }
    busy + current.map_or(0.0, |(s, e)| e - s)
}

impl Simulation {
    /// The timeline in Chrome's trace-event format (open it in Perfetto or chrome://tracing):
    /// one track per stream, plus the host's launch calls in eager mode.
    pub fn to_chrome_trace(&self, graph: &TaskGraph, plan: &StreamPlan) -> Value {
        const HOST_TRACK: usize = 1_000_000;
        let mut events: Vec<Value> = (0..plan.streams)
            .map(|s| json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": s, "args": {"name": format!("stream {s}")}}))
            .collect();
        if !self.host_launches.is_empty() {
            events.push(json!({"ph": "M", "name": "thread_name", "pid": 1, "tid": HOST_TRACK, "args": {"name": "host"}}));
        }
        for span in &self.spans {
            let node = graph.node(span.node);
            events.push(json!({
                "name": node.op, "ph": "X", "pid": 1, "tid": span.stream,
                "ts": span.start_us, "dur": span.end_us - span.start_us,
                "args": {"id": node.id},
            }));
        }
        for &(v, start, end) in &self.host_launches {
            events.push(json!({
                "name": format!("launch {}", graph.node(v).op), "ph": "X", "pid": 1, "tid": HOST_TRACK,
                "ts": start, "dur": end - start, "args": {"id": graph.node(v).id},
            }));
        }
        json!({
            "traceEvents": events,
            "displayTimeUnit": "ns",
            "otherData": {"algorithm": plan.algorithm, "mode": self.mode, "makespan_us": self.makespan_us},
        })
    }
}
