//! Time of Nimble's stream assignment (analysis included): on DNN-like graphs of 1k–20k nodes,
//! and on every synthetic family at about 10,000 nodes (`dnn`, random wide `layered`, `nasnet`
//! cells, `fan` branches).
//!
//! `cargo bench -p nimble-sched --bench assign`. The README quotes the medians.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use nimble_graph::SyntheticSpec;
use nimble_sched::{algorithms, Analysis};

/// The four families at about 10,000 nodes each.
const FAMILIES: &[&str] = &["dnn:10000", "layered:10000", "nasnet:334", "fan:100:100"];

fn assign(c: &mut Criterion) {
    let mut group = c.benchmark_group("assign");
    group.sample_size(10);
    for nodes in [1_000, 5_000, 10_000, 20_000] {
        let graph = SyntheticSpec::Dnn { nodes, seed: 0 }.generate();
        for name in ["nimble", "single"] {
            let assigner = algorithms::by_name(name).expect("registered");
            group.bench_with_input(BenchmarkId::new(name, nodes), &graph, |b, graph| b.iter(|| assigner.assign(&Analysis::new(graph))));
        }
    }
    group.finish();

    let mut group = c.benchmark_group("families");
    group.sample_size(20);
    let nimble = algorithms::by_name("nimble").expect("registered");
    for spec in FAMILIES {
        let graph = spec.parse::<SyntheticSpec>().expect("a valid spec").generate();
        group.bench_with_input(BenchmarkId::new("nimble", format!("{spec} ({} nodes)", graph.len())), &graph, |b, graph| {
            b.iter(|| nimble.assign(&Analysis::new(graph)))
        });
    }
    group.finish();
}

criterion_group!(benches, assign);
criterion_main!(benches);
