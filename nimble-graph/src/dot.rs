//! Graphviz (DOT) export, optionally colored by stream with sync edges highlighted.

use std::collections::HashSet;
use std::fmt::Write;

use crate::graph::TaskGraph;

/// What to draw on top of the graph itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct DotOptions<'a> {
    /// Stream of each node by index; nodes are filled with their stream's color when given.
    pub stream_of: Option<&'a [usize]>,
    /// Edges carrying an event sync (recorded after `u`, waited before `v`): drawn red and bold,
    /// dashed if the task graph itself has no such edge.
    pub sync_edges: &'a [(usize, usize)],
    /// Graph label.
    pub title: Option<&'a str>,
}

/// Twelve distinguishable fill colors (ColorBrewer Set3); streams beyond twelve reuse them.
const PALETTE: [&str; 12] = [
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
    "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f",
];

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

impl TaskGraph {
    /// The graph in DOT syntax. Labels show the id, op, duration and (if given) stream.
    pub fn to_dot(&self, options: DotOptions<'_>) -> String {
        let mut out = String::from("digraph tasks {\n  rankdir=TB;\n  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\"];\n");
        if let Some(title) = options.title {
            let _ = writeln!(out, "  label=\"{}\"; labelloc=t;", escape(title));
        }
        for (index, node) in self.nodes().iter().enumerate() {
            let mut label = format!("{}: {}", node.id, escape(&node.op));
            if let Some(us) = node.duration_us {
                let _ = write!(label, "\\n{us:.1} µs");
            }
            let mut attributes = String::new();
            if let Some(stream) = options.stream_of.and_then(|s| s.get(index)) {
                let _ = write!(label, "\\nstream {stream}");
                let _ = write!(attributes, ", fillcolor=\"{}\"", PALETTE[stream % PALETTE.len()]);
            }
            let _ = writeln!(out, "  n{} [label=\"{label}\"{attributes}];", node.id);
        }
        let syncs: HashSet<(usize, usize)> = options.sync_edges.iter().copied().collect();
        for (u, v) in self.edges() {
            let style = if syncs.contains(&(u, v)) { " [color=red, penwidth=2]" } else { "" };
            let _ = writeln!(out, "  n{} -> n{}{style};", self.id_of(u), self.id_of(v));
        }
        let edges: HashSet<(usize, usize)> = self.edges().collect();
        for &(u, v) in options.sync_edges.iter().filter(|e| !edges.contains(e)) {
            let _ = writeln!(
                out,
                "  n{} -> n{} [color=red, penwidth=2, style=dashed, constraint=false];",
                self.id_of(u),
                self.id_of(v)
            );
        }
        out.push_str("}\n");
        out
    }
}
