//! `nimble-graph`: the task-graph IR of the Nimble project.
//!
//! The bottom layer: no GPU, no libtorch. A [`TaskGraph`] is a validated DAG of GPU tasks
//! (operators), built with [`TaskGraphBuilder`] or read from JSON, with the analyses stream
//! assignment needs: topological order, [reachability](TaskGraph::reachability), the
//! [minimum equivalent graph](TaskGraph::transitive_reduction), the
//! [critical path](TaskGraph::critical_path) and the [width](TaskGraph::width); maximum
//! bipartite [matching]; [Graphviz export](TaskGraph::to_dot); [synthetic](synth) graphs; and
//! a whole [training step](step) built around a recorded forward.
//!
//! ```
//! use nimble_graph::TaskGraph;
//! let graph = TaskGraph::from_json_str(
//!     r#"{"nodes":[{"id":0,"op":"aten::conv2d","duration_us":12.5},{"id":1,"op":"aten::relu"}],
//!         "edges":[[0,1]]}"#,
//! )?;
//! assert_eq!(graph.critical_path().length_us, 12.5);
//! # Ok::<(), nimble_graph::GraphError>(())
//! ```

pub mod adjacency;
pub mod analysis;
pub mod bitset;
pub mod dot;
pub mod error;
pub mod files;
pub mod graph;
pub mod json;
pub mod matching;
pub mod reachability;
pub mod step;
pub mod synth;

pub use adjacency::Adjacency;
pub use analysis::CriticalPath;
pub use reachability::Reachability;
pub use dot::DotOptions;
pub use error::{GraphError, Result};
pub use graph::{compact, Node, TaskGraph, TaskGraphBuilder, MAX_DURATION_US, MAX_NODES};
pub use synth::SyntheticSpec;
