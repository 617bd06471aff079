//! The committed GPU measurements keep checking the simulator: re-simulating every run of
//! `paper-figs/results/simulator-validation.json` with today's default parameters must stay
//! within the goals (median |error| ≤ 10% for graph launch, ≤ 15% for eager launch).

use std::path::PathBuf;

use experiments::simulator_validation::{evaluate, ValidationRecord, SUITE};
use nimble_sched::SimulatorConfig;

fn committed_record() -> ValidationRecord {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results/simulator-validation.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).expect("the committed record parses")
}

#[test]
fn simulator_matches_the_committed_gpu_measurements() {
    let record = committed_record();
    let evaluation = evaluate(&record, &SimulatorConfig::graph(), &SimulatorConfig::eager()).unwrap();
    assert!(evaluation.median_abs_error_graph <= 0.10, "graph mode: median error {:.1}%", evaluation.median_abs_error_graph * 100.0);
    assert!(evaluation.median_abs_error_eager <= 0.15, "eager mode: median error {:.1}%", evaluation.median_abs_error_eager * 100.0);
}

#[test]
fn the_record_covers_the_whole_suite_with_provenance() {
    let record = committed_record();
    let algorithms = experiments::simulator_validation::algorithm_names().len();
    assert_eq!(record.runs.len(), SUITE.len() * algorithms * 2);
    for entry in SUITE {
        assert!(record.runs.iter().any(|r| r.graph == entry.spec && r.zero_durations == entry.zero_durations), "{} missing", entry.spec);
    }
    let provenance = &record.provenance;
    assert!(!provenance.gpu.is_empty() && provenance.commit.len() >= 40 && !provenance.commit.ends_with("-dirty"));
    assert_eq!((provenance.warmup, provenance.iterations), (50, 100));
    assert!(record.runs.iter().all(|r| r.measured.samples_us.len() == 100));
}
