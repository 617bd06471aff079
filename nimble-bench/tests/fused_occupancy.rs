//! The committed fused-kernel graphs with each kernel's share of the GPU
//! (`paper-figs/results/fused-kernel-graphs-occupancy/`, Inductor's kernels at batch 16 on an
//! H100): planned by every registered algorithm and simulated without a GPU, the SMs shared
//! among concurrent kernels, and the numbers docs/log.md publishes from them.

mod common;

use common::{nimble_bench, scratch, stdout};
use nimble_graph::TaskGraph;

const DIR: &str = "../paper-figs/results/fused-kernel-graphs-occupancy";

fn read(path: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_occupancy_graphs_simulate_with_shared_sms_under_every_algorithm() {
    let results = scratch("occupancy-simulated.json");
    let figures = scratch("occupancy-figures");
    stdout(&nimble_bench(&["schedulers", "--simulate", "--graphs", DIR, "--results", results.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]));
    let record = read(results.to_str().unwrap());
    let provenance = read(&format!("{DIR}/provenance.json"));
    let models = record["models"].as_array().unwrap();
    assert_eq!(models.len(), provenance["graphs"].as_array().unwrap().len());
    assert_eq!(models.len(), 4);
    // docs/log.md: Nimble's plan simulated at these speedups over one stream, the SMs shared
    // (the kernel-timed calibration: every task has `kernels`); the simulation is deterministic.
    let published = [("inception-v3", 1.19), ("googlenet", 1.30), ("inception-v4", 1.23), ("nasnet-a-large", 1.04)];
    for (model, speedup) in published {
        let m = models.iter().find(|m| m["model"] == format!("{model}-float32-b16").as_str()).unwrap();
        assert_eq!(m["simulator"]["min_sm_share"], 0.35, "{m}");
        let rows = m["rows"].as_array().unwrap();
        assert_eq!(rows.len(), nimble_sched::algorithms::ALGORITHMS.len(), "{m}");
        let time = |name: &str| rows.iter().find(|r| r["algorithm"] == name).unwrap()["graph_makespan_us"].as_f64().unwrap();
        let floor = m["floor_us"].as_f64().unwrap();
        for r in rows {
            let makespan = r["graph_makespan_us"].as_f64().unwrap();
            assert!(makespan >= floor * 0.999 && makespan <= time("single") * 1.001, "{m}");
        }
        let simulated = time("single") / time("nimble");
        assert!((simulated - speedup).abs() < 0.005, "{model}: {simulated}");
    }
}

#[test]
fn the_published_occupancy_is_what_the_graphs_hold() {
    // docs/log.md: each kernel's time by its share of the GPU's block slots, summed, is 0.70
    // (Inception-v3), 0.49 (GoogLeNet) and 0.64 (Inception-v4) of reduce-overhead's latency in
    // the same process, and NASNet-A large's is 0.97 of its kernels' summed time.
    let provenance = read(&format!("{DIR}/provenance.json"));
    let published = [("inception-v3", Some(0.70), 0.79), ("googlenet", Some(0.49), 0.73), ("inception-v4", Some(0.64), 0.76), ("nasnet-a-large", None, 0.97)];
    for (model, of_reduce_overhead, of_busy) in published {
        let file = format!("{model}-float32-b16.graph.json");
        let graph = TaskGraph::read_json(format!("{DIR}/{file}.gz")).unwrap();
        let (mut busy, mut occupied) = (0.0, 0.0);
        for node in graph.nodes() {
            let duration = node.duration_us.unwrap();
            let share = node.attrs["sm_share"].as_f64().unwrap();
            assert!(share > 0.0 && share <= 1.0 && node.attrs["kernels"].as_u64().unwrap() >= 1, "{model}: {node:?}");
            busy += duration;
            occupied += duration * share;
        }
        assert!((occupied / busy - of_busy).abs() < 0.005, "{model}: {}", occupied / busy);
        let entry = provenance["graphs"].as_array().unwrap().iter().find(|g| g["file"] == file.as_str()).unwrap();
        assert!((entry["occupied_us"].as_f64().unwrap() - occupied).abs() < 1e-6 * occupied, "{entry}");
        if let Some(ratio) = of_reduce_overhead {
            let latency_us = entry["reduce_overhead_ms"].as_f64().unwrap() * 1000.0;
            assert!((occupied / latency_us - ratio).abs() < 0.005, "{model}: {}", occupied / latency_us);
        }
    }
}
