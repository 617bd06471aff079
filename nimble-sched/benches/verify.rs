//! Time of the plan checker (`verify`) on Nimble's plans: the widest fan a graph may be
//! (`fan:99998:1`, 99,998 branches on as many streams, 199,994 syncs into the sink), and the
//! families of the `assign` bench at about 10,000 nodes; the report's width (a matching on
//! reachability) included, the analysis not. Ends by printing the process's peak
//! resident memory.
//!
//! `cargo bench -p nimble-sched --bench verify`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use nimble_graph::SyntheticSpec;
use nimble_sched::{algorithms, verify, Analysis};

fn check(c: &mut Criterion) {
    let mut group = c.benchmark_group("verify");
    group.sample_size(10);
    let nimble = algorithms::by_name("nimble").expect("registered");
    for spec in ["fan:99998:1", "dnn:10000", "layered:10000", "nasnet:334", "fan:100:100"] {
        let graph = spec.parse::<SyntheticSpec>().expect("a valid spec").generate();
        let analysis = Analysis::new(&graph);
        let plan = nimble.assign(&analysis);
        group.bench_with_input(BenchmarkId::new("nimble", format!("{spec} ({} nodes, {} syncs)", graph.len(), plan.syncs.len())), &plan, |b, plan| {
            b.iter(|| assert!(verify(&analysis, plan).is_valid()))
        });
    }
    group.finish();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if let Some(peak) = status.lines().find(|l| l.starts_with("VmHWM")) {
        println!("peak resident memory of the bench process: {}", peak.trim_start_matches("VmHWM:").trim());
    }
}

criterion_group!(benches, check);
criterion_main!(benches);
