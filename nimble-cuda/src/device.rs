//! The GPU: probing, contexts, streams, events, stream capture and graphs.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::sys::{CUevent_flags, CUgraph, CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaEvent, CudaGraph, CudaStream};
use nimble_graph::{Node, TaskGraphBuilder};
use serde::{Deserialize, Serialize};

use crate::error::{CudaError, Result};
use crate::ffi;

/// What a GPU is, for result records.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub compute_capability: (i32, i32),
    pub multiprocessors: i32,
    /// The driver's CUDA version as "major.minor".
    pub driver_cuda_version: String,
}

/// An opened GPU (a primary context on one device).
pub struct Gpu {
    context: Arc<CudaContext>,
    info: DeviceInfo,
}

impl Gpu {
    /// Checks for a usable GPU without opening it for work.
    ///
    /// # Errors
    /// [`CudaError::NoGpu`] saying what is missing: the driver library, or any device.
    pub fn probe() -> Result<()> {
        if !ffi::driver_library_present() {
            return Err(CudaError::NoGpu("the CUDA driver library (libcuda) is not installed".into()));
        }
        match CudaContext::device_count() {
            Ok(count) if count > 0 => Ok(()),
            Ok(_) => Err(CudaError::NoGpu("the driver reports no CUDA device".into())),
            Err(error) => Err(CudaError::NoGpu(format!("the driver could not be initialised: {error}"))),
        }
    }

    /// Opens device `ordinal`, with cudarc's per-buffer event tracking off (our executors order
    /// work with explicit events, which multi-stream capture requires).
    pub fn open(ordinal: usize) -> Result<Gpu> {
        Gpu::probe()?;
        let context = CudaContext::new(ordinal).map_err(|e| CudaError::NoGpu(format!("device {ordinal}: {e}")))?;
        ffi::disable_event_tracking(&context);
        let version = ffi::driver_version()?;
        use cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT;
        let info = DeviceInfo {
            name: context.name()?,
            compute_capability: context.compute_capability()?,
            multiprocessors: context.attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            driver_cuda_version: format!("{}.{}", version / 1000, version % 1000 / 10),
        };
        Ok(Gpu { context, info })
    }

    /// What this GPU is.
    pub fn info(&self) -> &DeviceInfo {
        &self.info
    }

    /// The underlying cudarc context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// A new non-blocking stream.
    pub fn stream(&self) -> Result<Arc<CudaStream>> {
        Ok(self.context.new_stream()?)
    }

    /// A pool of `count` new non-blocking streams.
    pub fn streams(&self, count: usize) -> Result<Vec<Arc<CudaStream>>> {
        (0..count).map(|_| self.stream()).collect()
    }

    /// A new non-blocking stream with a priority (lower numbers run first; see
    /// [`Gpu::stream_priority_range`]).
    pub fn stream_with_priority(&self, priority: i32) -> Result<Arc<CudaStream>> {
        Ok(self.context.new_stream_with_priority(priority)?)
    }

    /// `(lowest, highest)` stream priorities, as numbers (the highest priority is the smaller).
    pub fn stream_priority_range(&self) -> Result<(i32, i32)> {
        self.context.bind_to_thread()?;
        Ok(cudarc::driver::result::stream::get_priority_range()?)
    }

    /// A new event; timing events can measure elapsed time, non-timing ones are cheaper and are
    /// what syncs between streams use.
    pub fn event(&self, timing: bool) -> Result<CudaEvent> {
        let flags = if timing { CUevent_flags::CU_EVENT_DEFAULT } else { CUevent_flags::CU_EVENT_DISABLE_TIMING };
        Ok(self.context.new_event(Some(flags))?)
    }
}

/// How strictly the driver polices other CUDA calls while a capture is under way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaptureMode {
    /// Unsafe calls (e.g. `cudaMalloc`) from any thread fail during the capture.
    Global,
    /// Only this thread's unsafe calls fail.
    ThreadLocal,
    /// Nothing is policed; the caller guarantees correctness.
    Relaxed,
}

impl CaptureMode {
    fn raw(self) -> CUstreamCaptureMode {
        match self {
            CaptureMode::Global => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL,
            CaptureMode::ThreadLocal => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            CaptureMode::Relaxed => CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        }
    }
}

/// Captures what `body` issues on `origin` (and on every stream it joins into the capture
/// through events) as one instantiated graph.
///
/// The capture is always ended, even when `body` fails, so the stream is never left capturing.
/// Capturing no work at all is [`CudaError::EmptyCapture`].
/// Every stream joined into the capture must be joined back into `origin` before `body` returns.
pub fn capture(origin: &Arc<CudaStream>, mode: CaptureMode, body: impl FnOnce() -> Result<()>) -> Result<Graph> {
    origin.begin_capture(mode.raw())?;
    let issued = body();
    let ended = origin.end_capture(CUgraphInstantiate_flags(0));
    issued?;
    let graph = ended?.ok_or(CudaError::EmptyCapture)?;
    if ffi::captured_node_count(&graph)? == 0 {
        return Err(CudaError::EmptyCapture);
    }
    Ok(Graph { graph })
}

/// An instantiated CUDA graph, launched on the stream it was captured from.
pub struct Graph {
    graph: CudaGraph,
}

impl Graph {
    /// Launches the graph (asynchronously, on its capture stream).
    pub fn launch(&self) -> Result<()> {
        Ok(self.graph.launch()?)
    }

    /// Uploads the graph's resources so the first launch pays no set-up.
    pub fn upload(&self) -> Result<()> {
        Ok(self.graph.upload()?)
    }

    /// The captured graph's nodes and edges.
    pub fn structure(&self) -> Result<GraphStructure> {
        Ok(GraphStructure::from_parts(ffi::captured_nodes_and_edges(&self.graph)?))
    }
}

/// The shape of a CUDA graph: node types and dependency edges.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GraphStructure {
    /// Node type per node, lower-case (`kernel`, `empty`, `memcpy`, `event_record`, …).
    pub node_types: Vec<String>,
    /// Dependencies as node-index pairs.
    pub edges: Vec<(usize, usize)>,
}

impl GraphStructure {
    fn from_parts((types, edges): ffi::NodesAndEdges) -> GraphStructure {
        GraphStructure { node_types: types.iter().map(node_type_name).collect(), edges }
    }

    /// Reads a raw `CUgraph` handed over by another owner (e.g. libtorch's `CUDAGraph` built
    /// with `keep_graph`).
    ///
    /// # Safety
    /// `graph` must be a valid `CUgraph`, alive and unmodified for the duration of the call, and
    /// its context must be current on this thread.
    pub unsafe fn from_raw(graph: CUgraph) -> Result<GraphStructure> {
        // SAFETY: forwarded to the caller's contract above.
        Ok(GraphStructure::from_parts(unsafe { ffi::graph_nodes_and_edges(graph) }?))
    }

    /// Node count per type.
    pub fn counts_by_type(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for node_type in &self.node_types {
            *counts.entry(node_type.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Number of kernel nodes.
    pub fn kernel_count(&self) -> usize {
        self.node_types.iter().filter(|t| *t == "kernel").count()
    }

    /// The graph's maximum parallel width: the largest set of nodes no dependency path joins
    /// (computed by `nimble-graph`). A multi-stream capture of a plan with k concurrent
    /// streams should show a width of at least k.
    pub fn width(&self) -> usize {
        let mut builder = TaskGraphBuilder::new();
        for (i, node_type) in self.node_types.iter().enumerate() {
            builder.add_node(Node::new(i as u64, node_type.clone())).expect("indices are unique");
        }
        for &(u, v) in &self.edges {
            // CUDA graphs have no self-edges; ignore one rather than fail a read-only report.
            let _ = builder.add_edge(u as u64, v as u64);
        }
        match builder.build() {
            Ok(graph) => graph.width(&graph.reachability()),
            Err(_) => 0, // CUDA graphs are acyclic by construction
        }
    }
}

fn node_type_name(node_type: &cudarc::driver::sys::CUgraphNodeType) -> String {
    let debug = format!("{node_type:?}");
    debug.trim_start_matches("CU_GRAPH_NODE_TYPE_").to_lowercase()
}
