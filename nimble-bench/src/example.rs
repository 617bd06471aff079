//! The algorithm-example figure: a small DAG drawn through the steps of Nimble's stream
//! assignment, each panel rendered from what nimble-sched computes (the MEG, the bipartite
//! matching, the chains, the merged streams and the syncs), not drawn by hand.

use std::path::Path;

use anyhow::{bail, Context, Result};
use nimble_graph::{Node, TaskGraph, TaskGraphBuilder};
use nimble_sched::algorithms::{chain_decomposition, merge_chains, Nimble};
use nimble_sched::{Analysis, StreamAssigner};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::output::emit;
use crate::plots::{save, Drawing};

/// The largest graph the figure draws legibly.
const MAX_NODES: usize = 24;

/// The default example: an input feeding three branches that meet again, then two more that
/// meet, with two edges that other paths already imply (0 → 6 and 1 → 6), which the MEG drops.
/// Its chains outnumber the streams it needs, so the merge step shows.
pub fn default_graph() -> TaskGraph {
    let ops = ["input", "conv a", "conv b", "pool", "conv c", "conv d", "concat", "conv e", "conv f", "add"];
    let mut b = TaskGraphBuilder::new();
    for (i, op) in ops.iter().enumerate() {
        b.add_node(Node::new(i as u64, *op)).expect("unique ids");
    }
    for (u, v) in [(0, 1), (0, 2), (0, 3), (1, 4), (2, 4), (2, 5), (3, 5), (4, 6), (5, 6), (0, 6), (1, 6), (6, 7), (6, 8), (7, 9), (8, 9)] {
        b.add_edge(u, v).expect("known ids");
    }
    b.build().expect("a DAG")
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(25, 118, 210),
    RGBColor(255, 152, 0),
    RGBColor(76, 175, 80),
    RGBColor(156, 39, 176),
    RGBColor(0, 150, 136),
    RGBColor(233, 30, 99),
    RGBColor(121, 85, 72),
    RGBColor(96, 125, 139),
];

/// Node positions in one panel: columns by longest-path level, rows in index order.
fn layout(graph: &TaskGraph, width: i32, height: i32) -> Vec<(i32, i32)> {
    let n = graph.len();
    let mut level = vec![0usize; n];
    for &v in graph.topological_order() {
        for &w in graph.successors(v) {
            level[w] = level[w].max(level[v] + 1);
        }
    }
    let levels = level.iter().max().map_or(1, |m| m + 1);
    let mut row = vec![0usize; n];
    let mut count = vec![0usize; levels];
    for v in 0..n {
        row[v] = count[level[v]];
        count[level[v]] += 1;
    }
    (0..n)
        .map(|v| {
            let x = 30 + (level[v] as i32) * (width - 60) / (levels.max(2) as i32 - 1);
            let rows = count[level[v]] as i32;
            let y = 60 + ((row[v] as i32) * 2 + 1) * (height - 140) / (2 * rows);
            (x, y)
        })
        .collect()
}

fn edge<DB: DrawingBackend>(panel: &DrawingArea<DB, Shift>, a: (i32, i32), b: (i32, i32), color: RGBColor, width: u32) -> Result<()>
where
    DB::ErrorType: 'static,
{
    panel.draw(&PathElement::new(vec![a, b], color.stroke_width(width)))?;
    // An arrowhead a little before the target node.
    let (dx, dy) = ((b.0 - a.0) as f64, (b.1 - a.1) as f64);
    let length = (dx * dx + dy * dy).sqrt().max(1.0);
    let (ux, uy) = (dx / length, dy / length);
    let tip = (b.0 as f64 - ux * 11.0, b.1 as f64 - uy * 11.0);
    let side = |s: f64| ((tip.0 - ux * 7.0 - uy * 4.0 * s) as i32, (tip.1 - uy * 7.0 + ux * 4.0 * s) as i32);
    panel.draw(&Polygon::new(vec![(tip.0 as i32, tip.1 as i32), side(1.0), side(-1.0)], color.filled()))?;
    Ok(())
}

fn node<DB: DrawingBackend>(panel: &DrawingArea<DB, Shift>, at: (i32, i32), label: &str, color: RGBColor) -> Result<()>
where
    DB::ErrorType: 'static,
{
    panel.draw(&Circle::new(at, 10, color.filled()))?;
    let style = ("sans-serif", 11).into_font().color(&WHITE).pos(plotters::style::text_anchor::Pos::new(
        plotters::style::text_anchor::HPos::Center,
        plotters::style::text_anchor::VPos::Center,
    ));
    panel.draw(&Text::new(label.to_string(), at, style))?;
    Ok(())
}

fn caption<DB: DrawingBackend>(panel: &DrawingArea<DB, Shift>, height: i32, title: &str, lines: &[String]) -> Result<()>
where
    DB::ErrorType: 'static,
{
    panel.draw(&Text::new(title.to_string(), (10, 12), ("sans-serif", 15).into_font().color(&BLACK)))?;
    for (i, line) in lines.iter().enumerate() {
        panel.draw(&Text::new(line.clone(), (10, height - 60 + 16 * i as i32), ("sans-serif", 12).into_font().color(&BLACK.mix(0.8))))?;
    }
    Ok(())
}

/// What the figure shows, computed by nimble-sched.
struct Steps {
    graph: TaskGraph,
    width: usize,
    meg: Vec<(usize, usize)>,
    /// Matched MEG edges: consecutive nodes of a chain.
    matched: Vec<(usize, usize)>,
    chains: nimble_graph::Adjacency,
    chain_of: Vec<usize>,
    matching_size: usize,
    merges: usize,
    streams: nimble_graph::Adjacency,
    plan: nimble_sched::StreamPlan,
}

impl Steps {
    fn new(graph: TaskGraph) -> Steps {
        let analysis = Analysis::new(&graph);
        let chains = chain_decomposition(&analysis);
        let (merges, streams) = merge_chains(&analysis, &chains);
        let plan = Nimble { merge_chains: true }.assign(&analysis);
        let n = graph.len();
        let meg: Vec<(usize, usize)> = (0..n).flat_map(|u| analysis.meg_successors()[u].iter().map(move |&v| (u, v))).collect();
        let matched = chains.chains.iter().flat_map(|c| c.windows(2).map(|w| (w[0], w[1]))).collect();
        let mut chain_of = vec![0; n];
        for (c, chain) in chains.chains.iter().enumerate() {
            for &v in chain {
                chain_of[v] = c;
            }
        }
        let width = analysis.width();
        Steps { width, meg, matched, chain_of, matching_size: chains.matching_size, chains: chains.chains, merges, streams, plan, graph }
    }

    fn label(&self, v: usize) -> String {
        self.graph.id_of(v).to_string()
    }
}

const PANEL_W: i32 = 260;
const HEIGHT: i32 = 420;

impl Drawing for Steps {
    fn size(&self) -> (u32, u32) {
        (PANEL_W as u32 * 5, HEIGHT as u32)
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<()>
    where
        DB::ErrorType: 'static,
    {
        let (graph, n, height) = (&self.graph, self.graph.len(), HEIGHT);
        root.fill(&WHITE)?;
        let panels = root.split_evenly((1, 5));
        let at = layout(graph, PANEL_W, height);
        let grey = RGBColor(176, 190, 197);
        let dark = RGBColor(84, 110, 122);
        let color_of = |i: usize| PALETTE[i % PALETTE.len()];

        // 1. The task graph.
        for (u, v) in graph.edges() {
            edge(&panels[0], at[u], at[v], dark, 1)?;
        }
        for (v, &p) in at.iter().enumerate() {
            node(&panels[0], p, &self.label(v), dark)?;
        }
        caption(&panels[0], height, "1. task graph", &[format!("{n} tasks, {} edges", graph.edge_count()), format!("width {}", self.width)])?;

        // 2. The minimum equivalent graph.
        for &(u, v) in &self.meg {
            edge(&panels[1], at[u], at[v], dark, 1)?;
        }
        for (v, &p) in at.iter().enumerate() {
            node(&panels[1], p, &self.label(v), dark)?;
        }
        let dropped = graph.edge_count() - self.meg.len();
        caption(&panels[1], height, "2. minimum equivalent graph", &[format!("{} edges: {dropped} implied ones dropped", self.meg.len())])?;

        // 3. The bipartite graph and its maximum matching.
        let row = |v: usize| 60 + (v as i32 * 2 + 1) * (height - 140) / (2 * n as i32);
        let (left, right) = (60, PANEL_W - 60);
        for &(u, v) in &self.meg {
            let on = self.matched.contains(&(u, v));
            let (color, width) = if on { (color_of(self.chain_of[u]), 3) } else { (grey, 1) };
            panels[2].draw(&PathElement::new(vec![(left, row(u)), (right, row(v))], color.stroke_width(width)))?;
        }
        for v in 0..n {
            node(&panels[2], (left, row(v)), &self.label(v), dark)?;
            node(&panels[2], (right, row(v)), &self.label(v), dark)?;
        }
        let lines = ["left(u) - right(v) per MEG edge".to_string(), format!("maximum matching |M| = {}", self.matching_size)];
        caption(&panels[2], height, "3. bipartite graph, matching", &lines)?;

        // 4. Chains along the matched edges.
        for &(u, v) in &self.meg {
            let on = self.matched.contains(&(u, v));
            edge(&panels[3], at[u], at[v], if on { color_of(self.chain_of[u]) } else { grey }, if on { 3 } else { 1 })?;
        }
        for (v, &p) in at.iter().enumerate() {
            node(&panels[3], p, &self.label(v), color_of(self.chain_of[v]))?;
        }
        caption(&panels[3], height, "4. chains", &[format!("|V| - |M| = {} chains", self.chains.len())])?;

        // 5. Streams after merging chains, and the syncs.
        let plan = &self.plan;
        for &(u, v) in &self.meg {
            let same = plan.stream_of[u] == plan.stream_of[v];
            let synced = plan.syncs.contains(&(u, v));
            let color = if synced { RGBColor(211, 47, 47) } else if same { color_of(plan.stream_of[u]) } else { grey };
            edge(&panels[4], at[u], at[v], color, if synced || same { 3 } else { 1 })?;
        }
        for (v, &p) in at.iter().enumerate() {
            node(&panels[4], p, &self.label(v), color_of(plan.stream_of[v]))?;
        }
        let lines = [format!("{} streams ({} chains merged)", plan.streams, self.merges), format!("{} syncs (red)", plan.syncs.len())];
        caption(&panels[4], height, "5. streams and syncs", &lines)?;
        Ok(())
    }
}

/// `algorithm-example`: draws `graph` (the default example when `None`) through the algorithm's
/// steps into `<out_dir>/algorithm-example.svg` (and `.png`) and prints each step's numbers.
pub fn algorithm_example(graph: Option<TaskGraph>, out_dir: &Path) -> Result<()> {
    let graph = graph.unwrap_or_else(default_graph);
    if graph.len() > MAX_NODES || graph.is_empty() {
        bail!("the algorithm example draws graphs of 1 to {MAX_NODES} nodes legibly; this one has {}", graph.len());
    }
    let steps = Steps::new(graph);
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating the figure directory {}", out_dir.display()))?;
    let path = out_dir.join("algorithm-example.svg");
    save(&steps, &path)?;
    let name = |list: &[usize]| list.iter().map(|&v| steps.label(v)).collect::<Vec<_>>().join("→");
    let (graph, plan) = (&steps.graph, &steps.plan);
    let lines = [
        "algorithm-example: Nimble's stream assignment, step by step (nimble-sched's own output)".to_string(),
        format!("1. task graph: {} tasks, {} edges, width {}", graph.len(), graph.edge_count(), steps.width),
        format!("2. MEG: {} edges ({} implied edges dropped)", steps.meg.len(), graph.edge_count() - steps.meg.len()),
        format!("3. maximum matching of the bipartite graph: |M| = {}", steps.matching_size),
        format!("4. chains: {}", steps.chains.iter().map(&name).collect::<Vec<_>>().join(", ")),
        format!(
            "5. streams: {}; syncs: {}",
            steps.streams.iter().map(|s| s.iter().map(|&c| name(&steps.chains[c])).collect::<Vec<_>>().join(" | ")).collect::<Vec<_>>().join("; "),
            plan.syncs.iter().map(|&(u, v)| format!("{}→{}", steps.label(u), steps.label(v))).collect::<Vec<_>>().join(", ")
        ),
        format!("figure: {}", path.display()),
    ];
    emit(&lines.join("\n"))
}
