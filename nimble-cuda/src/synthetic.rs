//! The synthetic-kernel executor: runs any task graph with any stream plan on the GPU, one
//! kernel per node that keeps the GPU busy for the node's `duration_us`.
//!
//! The kernel spins on the SM's cycle counter (`clock64`) for a number of cycles; the cycles per
//! microsecond are measured once per executor by timing a long spin with CUDA events, so a
//! node of `d` µs spins for `d × cycles_per_us` cycles. Each kernel runs `blocks` blocks of one
//! warp, i.e. occupies `blocks` SMs. Two modes, as in the simulator: eager (launch node by node
//! on the planned streams with events) and graph (capture the same launches once, replay).

use std::sync::Arc;

use cudarc::driver::{CudaEvent, CudaFunction, CudaStream};
use nimble_graph::TaskGraph;
use nimble_sched::{LaunchMode, StreamPlan};

use crate::device::{capture, CaptureMode, Gpu, Graph};
use crate::error::{CudaError, Result};
use crate::ffi;
use crate::measure::Samples;
use crate::sequence::{launch_sequence, recorded_nodes, LaunchStep};

const SPIN_SOURCE: &str = r#"
extern "C" __global__ void nimble_spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"#;

/// The compiled spin kernel and its calibration.
pub struct SpinKernel {
    function: CudaFunction,
    /// SM clock cycles per microsecond, measured.
    pub cycles_per_us: f64,
    /// Blocks (SMs) each kernel occupies.
    pub blocks: u32,
}

impl SpinKernel {
    /// Compiles the kernel with NVRTC, loads it, and calibrates it on `gpu`.
    pub fn new(gpu: &Gpu, blocks: u32) -> Result<SpinKernel> {
        if !ffi::nvrtc_library_present() {
            return Err(CudaError::Compile("the NVRTC library (libnvrtc) is not installed".into()));
        }
        let ptx = cudarc::nvrtc::compile_ptx(SPIN_SOURCE).map_err(|e| CudaError::Compile(e.to_string()))?;
        let module = gpu.context().load_module(ptx)?;
        let function = module.load_function("nimble_spin")?;
        let mut kernel = SpinKernel { function, cycles_per_us: 1.0, blocks: blocks.max(1) };
        kernel.cycles_per_us = kernel.calibrate(gpu)?;
        Ok(kernel)
    }

    /// Launches one spin of `cycles` on `stream`.
    pub fn launch_cycles(&self, stream: &CudaStream, cycles: &i64) -> Result<()> {
        ffi::launch_spin(stream, &self.function, cycles, self.blocks)
    }

    /// Cycles for a kernel of `duration_us`.
    pub fn cycles_for(&self, duration_us: f64) -> i64 {
        (duration_us.max(0.0) * self.cycles_per_us).round() as i64
    }

    /// Times spins of 2×10⁷ cycles (about 10 ms) with events after a warm-up that lets the clocks
    /// settle; the median of five gives cycles per microsecond.
    fn calibrate(&self, gpu: &Gpu) -> Result<f64> {
        const CYCLES: i64 = 20_000_000;
        let stream = gpu.stream()?;
        let (start, end) = (gpu.event(true)?, gpu.event(true)?);
        for _ in 0..3 {
            self.launch_cycles(&stream, &CYCLES)?;
        }
        let mut rates = Vec::new();
        for _ in 0..5 {
            start.record(&stream)?;
            self.launch_cycles(&stream, &CYCLES)?;
            end.record(&stream)?;
            end.synchronize()?;
            rates.push(CYCLES as f64 / (f64::from(start.elapsed_ms(&end)?) * 1e3));
        }
        Ok(Samples::new(rates).median_us)
    }
}

/// A task graph and plan made ready to run: streams, events and per-node cycle counts.
pub struct SyntheticExecutor<'k> {
    kernel: &'k SpinKernel,
    steps: Vec<LaunchStep>,
    origin: Arc<CudaStream>,
    streams: Vec<Arc<CudaStream>>,
    node_events: Vec<Option<CudaEvent>>,
    fork: CudaEvent,
    joins: Vec<CudaEvent>,
    cycles: Vec<i64>,
    start: CudaEvent,
    end: CudaEvent,
}

impl<'k> SyntheticExecutor<'k> {
    /// Prepares `plan` for `graph`; nodes without `duration_us` run for `default_duration_us`.
    ///
    /// # Errors
    /// [`CudaError::InvalidPlan`] when the plan does not cover the graph or a sync goes backwards.
    pub fn new(gpu: &Gpu, kernel: &'k SpinKernel, graph: &TaskGraph, plan: &StreamPlan, default_duration_us: f64) -> Result<Self> {
        if plan.stream_of.len() != graph.len() {
            return Err(CudaError::InvalidPlan(format!("plan covers {} nodes, graph has {}", plan.stream_of.len(), graph.len())));
        }
        let steps = launch_sequence(plan).map_err(CudaError::InvalidPlan)?;
        let mut node_events: Vec<Option<CudaEvent>> = (0..graph.len()).map(|_| None).collect();
        for node in recorded_nodes(&steps) {
            node_events[node] = Some(gpu.event(false)?);
        }
        let cycles = (0..graph.len())
            .map(|v| kernel.cycles_for(graph.node(v).duration_us.unwrap_or(default_duration_us)))
            .collect();
        Ok(SyntheticExecutor {
            kernel,
            steps,
            origin: gpu.stream()?,
            streams: gpu.streams(plan.streams)?,
            node_events,
            fork: gpu.event(false)?,
            joins: (0..plan.streams).map(|_| gpu.event(false)).collect::<Result<_>>()?,
            cycles,
            start: gpu.event(true)?,
            end: gpu.event(true)?,
        })
    }

    /// Issues one run of the plan: fork from the origin stream, every node on its stream with
    /// its waits and records, join back into the origin.
    fn issue(&self) -> Result<()> {
        for step in &self.steps {
            match *step {
                LaunchStep::Fork => {
                    self.fork.record(&self.origin)?;
                    for stream in &self.streams {
                        stream.wait(&self.fork)?;
                    }
                }
                LaunchStep::Wait { after, stream } => {
                    let event = self.node_events[after].as_ref().expect("recorded nodes have events");
                    self.streams[stream].wait(event)?;
                }
                LaunchStep::Kernel { node, stream } => self.kernel.launch_cycles(&self.streams[stream], &self.cycles[node])?,
                LaunchStep::Record { node, stream } => {
                    self.node_events[node].as_ref().expect("recorded nodes have events").record(&self.streams[stream])?;
                }
                LaunchStep::Join => {
                    for (stream, join) in self.streams.iter().zip(&self.joins) {
                        join.record(stream)?;
                        self.origin.wait(join)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Captures one run of the plan as a graph on the origin stream.
    pub fn capture(&self, mode: CaptureMode) -> Result<Graph> {
        let graph = capture(&self.origin, mode, || self.issue())?;
        graph.upload()?;
        Ok(graph)
    }

    /// Times `iterations` runs after `warmup` untimed ones, each between two events on the
    /// origin stream, synchronising after each so runs never overlap. In graph mode the plan is
    /// captured once (global capture mode) and replayed.
    pub fn measure(&self, mode: LaunchMode, warmup: usize, iterations: usize) -> Result<Samples> {
        let graph = match mode {
            LaunchMode::Graph => Some(self.capture(CaptureMode::Global)?),
            LaunchMode::Eager => None,
        };
        let run = || -> Result<()> {
            match &graph {
                Some(graph) => graph.launch(),
                None => self.issue(),
            }
        };
        let mut samples = Vec::with_capacity(iterations);
        for i in 0..warmup + iterations {
            self.start.record(&self.origin)?;
            run()?;
            self.end.record(&self.origin)?;
            self.end.synchronize()?;
            if i >= warmup {
                samples.push(f64::from(self.start.elapsed_ms(&self.end)?) * 1e3);
            }
        }
        Ok(Samples::new(samples))
    }
}
