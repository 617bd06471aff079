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
