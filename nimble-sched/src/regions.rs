//! Regions: a [`StreamPlan`] cut into the largest pieces a compiler may fuse without breaking it.
//!
//! A region is a maximal run of tasks that the plan issues on one stream with no
//! synchronization inside: only its first task waits on events, only its last records one. So
//! a region can be handed to a compiler (Inductor) as one program, fused and buffer-reused
//! freely on one stream, and launched as a unit: wait on the events of its incoming syncs,
//! run, record its event if another region waits on it. This is how `torch.compile(backend=
//! "nimble")` puts the compiler's fused kernels on Nimble's streams.
//!
//! Every task is in exactly one region; regions in issue order (of their first task) are a
//! topological order of the region graph, because a dependency that crosses streams enters a
//! stream only through a sync, which starts a region. With one stream (the `single`
//! algorithm) the whole graph is one region: the compiler's own program.

use std::collections::BTreeSet;

use nimble_graph::TaskGraph;
use serde_json::{json, Value};

use crate::plan::StreamPlan;

/// One region: its stream and its tasks (node indices) in issue order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub stream: usize,
    pub nodes: Vec<usize>,
}

/// A plan's regions, with the region graph's dependencies and syncs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionPlan {
    /// Streams of the plan.
    pub streams: usize,
    /// Regions in issue order of their first task.
    pub regions: Vec<Region>,
    /// Region of each node, by node index.
    pub region_of: Vec<usize>,
    /// Region pairs `(a, b)`, `a < b`, joined by at least one task-graph edge, sorted.
    pub edges: Vec<(usize, usize)>,
    /// The plan's syncs between regions: `(a, b)` records an event at the end of `a` that `b`
    /// waits on before it starts; sorted.
    pub syncs: Vec<(usize, usize)>,
}

impl RegionPlan {
    /// Cuts `plan` (a plan for `graph`) into regions.
    ///
    /// # Arguments
    /// * `graph` – the task graph the plan was made for.
    /// * `plan` – any valid plan of it (checked with [`crate::verify`] by the caller).
    ///
    /// # Returns
    /// The regions, their dependencies and syncs; `region_of` maps tasks to regions.
    ///
    /// # Complexity
    /// O(V + E + S log S) for S syncs.
    pub fn from_plan(graph: &TaskGraph, plan: &StreamPlan) -> RegionPlan {
        let n = graph.len();
        let mut waits = vec![false; n];
        let mut records = vec![false; n];
        for &(u, v) in &plan.syncs {
            records[u] = true;
            waits[v] = true;
        }
        let mut regions: Vec<Region> = Vec::new();
        let mut region_of = vec![usize::MAX; n];
        // The open region of each stream: None after a task that records an event.
        let mut open: Vec<Option<usize>> = vec![None; plan.streams];
        for &v in &plan.order {
            let stream = plan.stream_of[v];
            let region = match open[stream] {
                Some(region) if !waits[v] => region,
                _ => {
                    regions.push(Region { stream, nodes: Vec::new() });
                    regions.len() - 1
                }
            };
            regions[region].nodes.push(v);
            region_of[v] = region;
            open[stream] = (!records[v]).then_some(region);
        }
        let edges: BTreeSet<(usize, usize)> = graph
            .edges()
            .map(|(u, v)| (region_of[u], region_of[v]))
            .filter(|(a, b)| a != b)
            .collect();
        let syncs: BTreeSet<(usize, usize)> = plan.syncs.iter().map(|&(u, v)| (region_of[u], region_of[v])).collect();
        RegionPlan { streams: plan.streams, regions, region_of, edges: edges.into_iter().collect(), syncs: syncs.into_iter().collect() }
    }

    /// The regions as JSON, tasks named by their ids: `streams`, `regions` (`[{"stream", "nodes"}]`
    /// in issue order), `edges` and `syncs` (`[[a, b], …]`, region indices).
    pub fn to_json(&self, graph: &TaskGraph) -> Value {
        let regions: Vec<Value> = self
            .regions
            .iter()
            .map(|r| json!({"stream": r.stream, "nodes": r.nodes.iter().map(|&v| graph.id_of(v)).collect::<Vec<_>>()}))
            .collect();
        json!({
            "streams": self.streams,
            "regions": regions,
            "edges": self.edges.iter().map(|&(a, b)| [a, b]).collect::<Vec<_>>(),
            "syncs": self.syncs.iter().map(|&(a, b)| [a, b]).collect::<Vec<_>>(),
        })
    }

    /// The first way these regions fail to be `plan`'s (an executor relies on each), if any:
    /// every task in exactly one region, each region's tasks on its stream, only a region's
    /// first task waiting and only its last recording, region order topological, and every
    /// region maximal (two consecutive regions of a stream split by a sync).
    pub fn violation(&self, graph: &TaskGraph, plan: &StreamPlan) -> Option<String> {
        let mut seen = vec![0usize; graph.len()];
        let mut waits = vec![false; graph.len()];
        let mut records = vec![false; graph.len()];
        for &(u, v) in &plan.syncs {
            records[u] = true;
            waits[v] = true;
        }
        if self.region_of.len() != graph.len() {
            return Some(format!("region_of has {} entries for {} tasks", self.region_of.len(), graph.len()));
        }
        let mut last: Vec<Option<usize>> = vec![None; plan.streams];
        for (index, region) in self.regions.iter().enumerate() {
            let (Some(&first), Some(&end)) = (region.nodes.first(), region.nodes.last()) else {
                return Some(format!("region {index} is empty"));
            };
            for (k, &v) in region.nodes.iter().enumerate() {
                seen[v] += 1;
                if self.region_of[v] != index || plan.stream_of[v] != region.stream {
                    return Some(format!("task {} is in region {index} on stream {} but mapped to region {}, stream {}", graph.id_of(v), region.stream, self.region_of[v], plan.stream_of[v]));
                }
                if (waits[v] && k != 0) || (records[v] && v != end) {
                    return Some(format!("task {} synchronizes inside region {index}", graph.id_of(v)));
                }
            }
            if let Some(previous) = last[region.stream] {
                let previous_end = *self.regions[previous].nodes.last().expect("checked not empty");
                if !records[previous_end] && !waits[first] {
                    return Some(format!("regions {previous} and {index} of stream {} are not split by a sync", region.stream));
                }
            }
            last[region.stream] = Some(index);
        }
        if let Some(v) = seen.iter().position(|&c| c != 1) {
            return Some(format!("task {} is in {} regions", graph.id_of(v), seen[v]));
        }
        let out_of_order = |&(a, b): &(usize, usize)| a >= b || b >= self.regions.len();
        if let Some((a, b)) = self.edges.iter().chain(&self.syncs).copied().find(|e| out_of_order(e)) {
            return Some(format!("region dependency {a} -> {b} is not in issue order"));
        }
        for (u, v) in graph.edges() {
            let (a, b) = (self.region_of[u], self.region_of[v]);
            if a != b && self.edges.binary_search(&(a, b)).is_err() {
                return Some(format!("edge {} -> {} crosses regions {a} -> {b}, which edges lacks", graph.id_of(u), graph.id_of(v)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{algorithms, Analysis};
    use nimble_graph::SyntheticSpec;

    /// The properties an executor relies on, for every algorithm on every synthetic family.
    #[test]
    fn regions_partition_the_plan_and_keep_its_order() {
        for spec in ["dnn:300:3", "layered:300:5", "nasnet:6", "fan:12:4", "chain:20"] {
            let graph = spec.parse::<SyntheticSpec>().expect("a valid spec").generate();
            let analysis = Analysis::new(&graph);
            for info in algorithms::ALGORITHMS {
                let plan = algorithms::by_name(info.name).expect("registered").assign(&analysis);
                let regions = RegionPlan::from_plan(&graph, &plan);
                assert_eq!(regions.violation(&graph, &plan), None, "{spec} with {}", info.name);
            }
        }
    }

    /// A synthetic graph, `algorithm`'s plan for it, and the plan's regions.
    fn planned(spec: &str, algorithm: &str) -> (TaskGraph, StreamPlan, RegionPlan) {
        let graph = spec.parse::<SyntheticSpec>().expect("a valid spec").generate();
        let plan = algorithms::by_name(algorithm).expect("registered").assign(&Analysis::new(&graph));
        let regions = RegionPlan::from_plan(&graph, &plan);
        (graph, plan, regions)
    }

    /// One stream, one region: the compiler's whole program.
    #[test]
    fn single_stream_is_one_region() {
        let (_, _, regions) = planned("nasnet:3", "single");
        assert_eq!(regions.regions.len(), 1);
        assert!(regions.edges.is_empty() && regions.syncs.is_empty());
    }

    /// A fan of three branches of two tasks under nimble: the source, one region per branch, the sink.
    #[test]
    fn fan_regions_are_the_branches() {
        let (graph, plan, regions) = planned("fan:3:2", "nimble");
        assert_eq!(plan.streams, 3);
        // The source records the event the side branches wait on, so it ends its region; each
        // branch is a region, and the sink waits on two of them: a region of its own.
        let sizes: Vec<usize> = regions.regions.iter().map(|r| r.nodes.len()).collect();
        assert_eq!(sizes, [1, 2, 2, 2, 1]);
        assert_eq!(regions.violation(&graph, &plan), None);
    }

    /// `region_of` made to match `regions` again after a test edited them.
    fn renumber(regions: &mut RegionPlan) {
        for (index, region) in regions.regions.iter().enumerate() {
            for &v in &region.nodes {
                regions.region_of[v] = index;
            }
        }
    }

    /// The check catches regions an executor could not run: a task in two regions, a sync
    /// inside a region, and a region that could have been longer.
    #[test]
    fn violation_catches_broken_regions() {
        let (graph, plan, good) = planned("fan:3:2", "nimble");

        let mut twice = good.clone();
        let extra = twice.regions[1].nodes[0];
        twice.regions[2].nodes.push(extra);
        assert!(twice.violation(&graph, &plan).is_some());

        let mut synced_inside = good.clone();
        let first = synced_inside.regions.remove(0);
        synced_inside.regions[0].nodes.splice(0..0, first.nodes);
        renumber(&mut synced_inside);
        let message = synced_inside.violation(&graph, &plan).expect("a sync inside a region");
        assert!(message.contains("synchronizes inside"), "{message}");

        let mut split = good;
        let tail = split.regions[1].nodes.pop().expect("two tasks");
        split.regions.insert(2, Region { stream: split.regions[1].stream, nodes: vec![tail] });
        renumber(&mut split);
        let message = split.violation(&graph, &plan).expect("a region split without a sync");
        assert!(message.contains("not split"), "{message}");
    }
}
