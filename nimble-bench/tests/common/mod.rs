//! What the command-line tests share: running the binary, its output, scratch files.
#![allow(dead_code)] // each test file uses some of these

use std::path::PathBuf;
use std::process::{Command, Output};

pub fn nimble_bench(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nimble-bench")).args(arguments).output().expect("the binary runs")
}

pub fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "failed: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).expect("utf-8 output")
}

pub fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("nimble-bench-tests-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory.join(name)
}

pub fn write(name: &str, text: &str) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The text `nimble-bench COMMAND --results RECORDS --out-dir FIGURES` prints, having succeeded.
pub fn rendered(command: &str, records: &str, figures: &std::path::Path) -> String {
    stdout(&nimble_bench(&[command, "--results", records, "--out-dir", figures.to_str().unwrap()]))
}

/// Re-renders every figure from its committed record with the commands' defaults (the simulated
/// one with the algorithms its record names) and returns what changed, each changed file put
/// back first so that the checkout stays clean.
pub fn rerender_committed_figures() -> Vec<String> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let figures = root.join("paper-figs");
    let mut before = std::collections::BTreeMap::new();
    snapshot(&figures, &mut before);
    // The simulated figure holds the algorithms its record names, whatever else is registered.
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(root.join("paper-figs/results/schedulers-simulated.json")).unwrap()).unwrap();
    let named: Vec<&str> = record["models"][0]["rows"].as_array().unwrap().iter().map(|r| r["algorithm"].as_str().unwrap()).collect();
    let simulated = ["schedulers", "--simulate", "--out-dir", "paper-figs", "--algos", &named.join(",")];
    let commands: [&[&str]; 10] = [
        &["inference", "--from-results"],
        &["training", "--from-results"],
        &["overhead", "--from-results"],
        &["multistream", "--from-results"],
        &["schedulers", "--from-results"],
        &simulated,
        &["coverage"],
        &["scaling"],
        &["same-process"],
        &["algorithm-example"],
    ];
    let mut failures = Vec::new();
    for arguments in commands {
        let output = Command::new(env!("CARGO_BIN_EXE_nimble-bench")).args(arguments).current_dir(&root).output().expect("the binary runs");
        if !output.status.success() {
            failures.push(format!("{arguments:?} failed: {}", String::from_utf8_lossy(&output.stderr)));
        }
        let mut after = std::collections::BTreeMap::new();
        snapshot(&figures, &mut after);
        for (path, bytes) in &after {
            match before.get(path) {
                Some(old) if old == bytes => {}
                Some(old) => {
                    failures.push(format!("{arguments:?} rewrote {}", path.display()));
                    std::fs::write(path, old).unwrap();
                }
                None => {
                    failures.push(format!("{arguments:?} wrote {}", path.display()));
                    std::fs::remove_file(path).unwrap();
                }
            }
        }
    }
    failures
}

/// Every file under `dir`, with its bytes.
pub fn snapshot(dir: &std::path::Path, into: &mut std::collections::BTreeMap<PathBuf, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            snapshot(&path, into);
        } else {
            into.insert(path.clone(), std::fs::read(&path).unwrap());
        }
    }
}

