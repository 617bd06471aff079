//! Every `unsafe` block of `nimble-cuda`, each with the reason it is sound.
//!
//! cudarc already wraps most of the driver safely; what remains is probing for the libraries
//! (loading a shared library runs its initialisers), switching off cudarc's per-buffer event
//! tracking, launching a kernel (argument types cannot be checked against the kernel), and
//! reading a captured graph's nodes and edges through raw driver calls.

use std::sync::Arc;

use cudarc::driver::sys::{self, CUgraph, CUgraphNode, CUgraphNodeType};
use cudarc::driver::{CudaContext, CudaFunction, CudaGraph, CudaStream, LaunchConfig, PushKernelArg};

use crate::error::{CudaError, Result};

/// A graph's node types and its edges as node-index pairs.
pub(crate) type NodesAndEdges = (Vec<CUgraphNodeType>, Vec<(usize, usize)>);

/// Whether the CUDA driver library can be loaded.
pub(crate) fn driver_library_present() -> bool {
    // SAFETY: loading libcuda runs only the driver's own initialisers; cudarc opens it the same
    // way on first use. Checking first is what keeps `CudaContext::new` from panicking on a
    // machine without a driver.
    unsafe { sys::is_culib_present() }
}

/// Whether the NVRTC library can be loaded.
pub(crate) fn nvrtc_library_present() -> bool {
    // SAFETY: as above, for libnvrtc; cudarc's compile functions panic when it is missing.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// The driver's CUDA version, e.g. 13000 for 13.0.
pub(crate) fn driver_version() -> Result<i32> {
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer for the duration of the call; the library is
    // loaded (callers hold a context).
    unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
    Ok(version)
}

/// Stops cudarc from recording and waiting on an event per buffer argument of each launch.
/// Our executors order work explicitly with the plan's events; cudarc's hidden waits would add
/// dependencies a multi-stream capture must not have.
pub(crate) fn disable_event_tracking(context: &Arc<CudaContext>) {
    // SAFETY: called right after the context is created, before any buffer or stream exists, so
    // no pending work relies on the tracking being on.
    unsafe { context.disable_event_tracking() };
}

/// Launches the synthetic spin kernel `nimble_spin(long long cycles)` on `stream`.
pub(crate) fn launch_spin(stream: &CudaStream, kernel: &CudaFunction, cycles: &i64, blocks: u32) -> Result<()> {
    let config = LaunchConfig { grid_dim: (blocks.max(1), 1, 1), block_dim: (32, 1, 1), shared_mem_bytes: 0 };
    let mut launch = stream.launch_builder(kernel);
    launch.arg(cycles);
    // SAFETY: the kernel's one parameter is a `long long`, matching the `i64` passed by
    // reference, which outlives the call; the kernel touches no memory.
    unsafe { launch.launch(config) }?;
    Ok(())
}

/// Number of nodes of a graph this crate owns.
pub(crate) fn captured_node_count(graph: &CudaGraph) -> Result<usize> {
    let mut count = 0usize;
    // SAFETY: `graph` is alive and owned by us for the call; a null node array asks only for
    // the count.
    unsafe { sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut count) }.result()?;
    Ok(count)
}

/// Node types and edges of a graph this crate owns.
pub(crate) fn captured_nodes_and_edges(graph: &CudaGraph) -> Result<NodesAndEdges> {
    // SAFETY: `graph` is a live, instantiated graph that nothing else mutates during the call.
    unsafe { graph_nodes_and_edges(graph.cu_graph()) }
}

/// The node types and edges (as index pairs) of a CUDA graph.
///
/// # Safety
/// `graph` must be a valid `CUgraph` that is not modified or destroyed during the call; the
/// current thread must have its context bound.
pub(crate) unsafe fn graph_nodes_and_edges(graph: CUgraph) -> Result<NodesAndEdges> {
    if graph.is_null() {
        return Err(CudaError::EmptyCapture);
    }
    let mut count = 0usize;
    // SAFETY: a null node array asks only for the count (driver API contract).
    unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut count) }.result()?;
    if count == 0 {
        return Ok((Vec::new(), Vec::new()));
    }
    let mut nodes: Vec<CUgraphNode> = vec![std::ptr::null_mut(); count];
    // SAFETY: `nodes` has room for `count` handles.
    unsafe { sys::cuGraphGetNodes(graph, nodes.as_mut_ptr(), &mut count) }.result()?;
    nodes.truncate(count);
    let mut types = Vec::with_capacity(count);
    for &node in &nodes {
        let mut node_type = CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: `node` came from this graph; `node_type` is a valid out-pointer.
        unsafe { sys::cuGraphNodeGetType(node, &mut node_type) }.result()?;
        types.push(node_type);
    }
    let mut edge_count = 0usize;
    // SAFETY: null arrays ask only for the count; null edge data is allowed.
    unsafe {
        sys::cuGraphGetEdges_v2(graph, std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), &mut edge_count)
    }
    .result()?;
    if edge_count == 0 {
        return Ok((types, Vec::new()));
    }
    let mut from: Vec<CUgraphNode> = vec![std::ptr::null_mut(); edge_count];
    let mut to: Vec<CUgraphNode> = vec![std::ptr::null_mut(); edge_count];
    // SAFETY: CUgraphEdgeData is plain old data (ports, a type, reserved bytes): all zeros is
    // the default edge.
    let mut data: Vec<sys::CUgraphEdgeData> = (0..edge_count).map(|_| unsafe { std::mem::zeroed() }).collect();
    // SAFETY: all three arrays have room for `edge_count` entries. The edge data is asked for
    // because graphs captured by other owners (libtorch) can carry non-default edges, and the
    // driver refuses a query that would drop it (CUDA_ERROR_LOSSY_QUERY).
    unsafe { sys::cuGraphGetEdges_v2(graph, from.as_mut_ptr(), to.as_mut_ptr(), data.as_mut_ptr(), &mut edge_count) }
        .result()?;
    let index: std::collections::HashMap<CUgraphNode, usize> = nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let edges = from
        .iter()
        .zip(&to)
        .take(edge_count)
        .filter_map(|(f, t)| Some((*index.get(f)?, *index.get(t)?)))
        .collect();
    Ok((types, edges))
}
