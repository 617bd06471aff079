//! Reading and writing task graphs as JSON.
//!
//! The schema: `{"nodes":[{"id":0,"op":"aten::conv2d","duration_us":12.5}], "edges":[[0,1]]}`.
//! Per node, `id` and `op` are required; `duration_us`, `shapes` (a list of integer lists) and
//! `attrs` (an object) are optional; any other field is ignored, as is any other top-level field.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{GraphError, Result};
use crate::graph::{Node, TaskGraph, TaskGraphBuilder};


#[derive(Serialize, Deserialize)]
struct GraphFile {
    nodes: Vec<Node>,
    #[serde(default)]
    edges: Vec<[u64; 2]>,
}

impl TaskGraph {
    /// Parses a graph from JSON text and validates it.
    ///
    /// # Errors
    /// [`GraphError::Json`] with line and column for malformed text or a schema violation (a
    /// missing `op`, a negative id, …), then the builder's errors for duplicate ids, unknown ids,
    /// self-edges and cycles.
    pub fn from_json_str(text: &str) -> Result<TaskGraph> {
        let file: GraphFile = serde_json::from_str(text).map_err(|e| GraphError::Json {
            line: e.line(),
            column: e.column(),
            message: strip_position(&e.to_string()),
        })?;
        let mut builder = TaskGraphBuilder::new();
        for node in file.nodes {
            builder.add_node(node)?;
        }
        for [from, to] in file.edges {
            builder.add_edge(from, to)?;
        }
        builder.build()
    }

    /// Reads and validates a graph from a JSON file of at most [`MAX_GRAPH_FILE_BYTES`] (read
    /// with that bound, so `/dev/zero` or a huge file is an error, not an exhausted memory). A
    /// name ending in `.gz` is read through gzip, the bound applying to the decompressed text.
    pub fn read_json(path: impl AsRef<Path>) -> Result<TaskGraph> {
        TaskGraph::from_json_str(&read_text(path.as_ref())?)
    }

    /// The graph as JSON text in the schema above (edges as user ids).
    pub fn to_json_string(&self) -> String {
        let file = GraphFile {
            nodes: self.nodes().to_vec(),
            edges: self.edges().map(|(u, v)| [self.id_of(u), self.id_of(v)]).collect(),
        };
        serde_json::to_string(&file).expect("a task graph always serializes")
    }

    /// Writes the graph as JSON, atomically: a temporary file beside `path` is renamed over it,
    /// so an interrupted write never leaves a half-written graph.
    pub fn write_json(&self, path: impl AsRef<Path>) -> Result<()> {
        write_atomically(path.as_ref(), self.to_json_string().as_bytes())
    }
}

pub use crate::files::{read_text, write_atomically, MAX_GRAPH_FILE_BYTES};

/// serde_json appends " at line L column C" to its messages; we report those separately.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(cut) => message[..cut].to_string(),
        None => message.to_string(),
    }
}
