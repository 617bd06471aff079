//! The committed GPU measurements keep checking the simulator: re-simulating every run of
//! `paper-figs/results/simulator-validation.json` (the calibration runs) and
//! `simulator-holdout.json` (held-out graphs) with today's default parameters must stay within
//! twice the errors the README publishes for them (graph launch 0.6% and 0.4%, eager launch 4.7%
//! and 3.2%), well inside the goals (10% and 15%): a regression several times the published
//! error fails here.

use std::path::PathBuf;

use experiments::simulator_validation::{evaluate, SuiteGraph, ValidationRecord, HOLDOUT_SUITE, SUITE};
use nimble_sched::SimulatorConfig;

const RECORDS: [(&str, &[SuiteGraph]); 2] = [("simulator-validation.json", SUITE), ("simulator-holdout.json", HOLDOUT_SUITE)];
/// Twice the published median |error| of each record: (graph mode, eager mode).
const BOUNDS: [(f64, f64); 2] = [(0.012, 0.094), (0.008, 0.064)];

fn committed_record(name: &str) -> ValidationRecord {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results").join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("the committed record parses")
}

#[test]
fn simulator_matches_the_committed_gpu_measurements() {
    for ((name, _), (graph_bound, eager_bound)) in RECORDS.iter().zip(BOUNDS) {
        let record = committed_record(name);
        let evaluation = evaluate(&record, &SimulatorConfig::graph(), &SimulatorConfig::eager()).unwrap();
        assert!(evaluation.median_abs_error_graph <= graph_bound, "{name}, graph mode: median error {:.2}%", evaluation.median_abs_error_graph * 100.0);
        assert!(evaluation.median_abs_error_eager <= eager_bound, "{name}, eager mode: median error {:.2}%", evaluation.median_abs_error_eager * 100.0);
    }
}

/// Each record covers its suite under every algorithm it was measured with (those registered
/// then: an algorithm registered later, such as `nimble-critical`, has no measured runs to add),
/// each of them still registered, in both launch modes.
#[test]
fn the_records_cover_their_suites_with_provenance() {
    let registered = experiments::simulator_validation::algorithm_names();
    for (name, suite) in RECORDS {
        let record = committed_record(name);
        let measured: std::collections::BTreeSet<&str> = record.runs.iter().map(|r| r.algorithm.as_str()).collect();
        assert!(measured.len() >= 6 && measured.iter().all(|a| registered.iter().any(|r| a.split(':').next() == Some(r.as_str()))), "{name}: {measured:?}");
        assert_eq!(record.runs.len(), suite.len() * measured.len() * 2, "{name}");
        for entry in suite {
            for algorithm in &measured {
                assert!(record.runs.iter().any(|r| r.graph == entry.spec && r.zero_durations == entry.zero_durations && r.algorithm == *algorithm), "{name}: {} under {algorithm} missing", entry.spec);
            }
        }
        let provenance = &record.provenance;
        assert!(!provenance.gpu.is_empty() && provenance.commit.len() >= 40 && !provenance.commit.ends_with("-dirty"), "{name}");
        assert_eq!((provenance.warmup, provenance.iterations), (50, 100));
        assert!(record.runs.iter().all(|r| r.measured.samples_us.len() == 100));
    }
}
