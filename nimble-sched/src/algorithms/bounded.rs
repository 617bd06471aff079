//! `nimble-bounded:K`: Nimble's plan folded onto at most K streams.

use super::nimble::Nimble;
use super::weights::weight;
use crate::{Analysis, StreamAssigner, StreamPlan};

/// Nimble's plan ([`Nimble`] with its merge step), its streams then folded onto at most `K`:
/// each stream's span is taken from an as-soon-as-possible schedule of the graph (tasks
/// weighing their `duration_us`, 1 when unknown), and streams are dealt, earliest span first,
/// to the fold whose last span ended latest before this one starts (no overlap, so nothing that
/// could run side by side is put in line); only when none is free and K folds are open does a
/// stream join the fold that ends first, the least overlap. A fold's tasks are issued in the
/// graph's topological order. Nodes of different stream classes never share a fold (a class
/// gets a fold of its own even past K).
///
/// Why: a GPU has a fixed number of hardware queues (`CUDA_DEVICE_MAX_CONNECTIONS`, 8 unless
/// set). Past it, CUDA maps streams (and a CUDA graph's branches) onto the queues itself, and
/// two that share one run in line whatever the plan says. Nimble's plans of Inductor's kernels
/// at batch 16 have 10–19 streams (GoogLeNet, the Inceptions, NASNet-A large), most of them
/// never busy at the same time; folded onto K, it is the plan, not the driver, that picks which
/// go in line. With K at least the plan's streams this is `nimble` (renamed). Syncs are
/// recomputed for the folded streams and never exceed those the checker requires.
pub struct NimbleBounded {
    /// The most streams the plan may use (at least 1).
    pub streams: usize,
}

impl StreamAssigner for NimbleBounded {
    fn name(&self) -> String {
        format!("nimble-bounded:{}", self.streams)
    }

    fn assign(&self, analysis: &Analysis<'_>) -> StreamPlan {
        let plan = Nimble { merge_chains: true }.assign(analysis);
        if plan.streams <= self.streams {
            return StreamPlan { algorithm: self.name(), ..plan };
        }
        let graph = analysis.graph();
        let mut start = vec![0.0f64; graph.len()];
        let mut finish = vec![0.0f64; graph.len()];
        for &v in graph.topological_order() {
            start[v] = graph.predecessors(v).iter().map(|&u| finish[u]).fold(0.0, f64::max);
            finish[v] = start[v] + weight(graph, v);
        }
        let mut span = vec![(f64::INFINITY, 0.0f64); plan.streams];
        let mut class = vec![0u32; plan.streams];
        for (v, &s) in plan.stream_of.iter().enumerate() {
            span[s] = (span[s].0.min(start[v]), span[s].1.max(finish[v]));
            class[s] = analysis.stream_classes().map_or(0, |classes| classes[v]);
        }
        let mut by_start: Vec<usize> = (0..plan.streams).collect();
        by_start.sort_by(|&a, &b| span[a].0.total_cmp(&span[b].0).then(a.cmp(&b)));
        // Per fold: its class and where its last span ends.
        let mut folds: Vec<(u32, f64)> = Vec::new();
        let mut fold_of = vec![0usize; plan.streams];
        for s in by_start {
            let (begin, end) = span[s];
            let same_class = |f: &usize| folds[*f].0 == class[s];
            let free = (0..folds.len()).filter(same_class).filter(|&f| folds[f].1 <= begin).max_by(|&a, &b| folds[a].1.total_cmp(&folds[b].1).then(b.cmp(&a)));
            let least_overlap = || (0..folds.len()).filter(same_class).min_by(|&a, &b| folds[a].1.total_cmp(&folds[b].1).then(a.cmp(&b)));
            let fold = match free {
                Some(f) => f,
                None => match least_overlap().filter(|_| folds.len() >= self.streams) {
                    Some(f) => f,
                    None => {
                        folds.push((class[s], 0.0));
                        folds.len() - 1
                    }
                },
            };
            fold_of[s] = fold;
            folds[fold].1 = folds[fold].1.max(end);
        }
        let stream_of: Vec<usize> = plan.stream_of.iter().map(|&s| fold_of[s]).collect();
        StreamPlan::from_assignment(analysis, self.name(), &stream_of, None)
    }
}
