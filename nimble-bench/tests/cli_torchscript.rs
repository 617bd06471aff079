//! TorchScript files and zoo models from the command line (the `torch` feature): task graphs
//! exported on the CPU, the rewritten forward checked against eager, and one-line errors naming
//! what a file expected.
#![cfg(feature = "torch")]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{nimble_bench, scratch};

/// The TorchScript fixtures of nimble-torch's tests (`nimble-torch/tests/fixtures/make_modules.py`),
/// made once with the Python of `NIMBLE_PYTHON` (torch 2.11.0; see .cargo/config.toml).
fn torchscript_fixture(name: &str) -> PathBuf {
    static MADE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    let directory = MADE.get_or_init(|| {
        let python = std::env::var("NIMBLE_PYTHON").expect("NIMBLE_PYTHON names a Python with torch 2.11.0 (scripts/setup-libtorch.sh)");
        let directory = scratch("fixtures");
        std::fs::create_dir_all(&directory).unwrap();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../nimble-torch/tests/fixtures/make_modules.py");
        let output = Command::new(&python).arg(&script).arg(&directory).output().expect("python runs");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        directory
    });
    directory.join(name)
}

#[test]
fn any_torchscript_file_exports_its_task_graph_on_the_cpu() {
    let file = torchscript_fixture("multi_input.pt");
    let out = scratch("multi_input.graph.json");
    let file = file.to_str().unwrap();
    let inputs = ["--input", "2x5:int64:0:100", "--input", "2x5:bool", "--input", "2x5x16", "--input", "2x5:int32:0:5"];
    let mut arguments = vec!["export-graph", "--torchscript", file, "--optimize", "--out", out.to_str().unwrap()];
    arguments.extend(inputs);
    let output = nimble_bench(&arguments);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let graph: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let ops: Vec<&str> = graph["nodes"].as_array().unwrap().iter().map(|n| n["op"].as_str().unwrap()).collect();
    // `--optimize`: the linear layer is Nimble's, which chooses its GEMM on CUDA.
    assert!(ops.contains(&"aten::embedding") && ops.contains(&"nimble::linear"), "{ops:?}");
}

#[test]
fn export_graph_checks_the_rewritten_forward_against_eager_on_the_cpu() {
    // Convolutions scaled and shifted by Python numbers: the rewrites fold them into the weights.
    let file = torchscript_fixture("scaled_convs.pt");
    let out = scratch("scaled_convs.graph.json");
    let output = nimble_bench(&["export-graph", "--torchscript", file.to_str().unwrap(), "--input", "2x4x8x8", "--optimize", "--check", "--out", out.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let error: f64 = stderr.split("relative error ").nth(1).and_then(|rest| rest.split_whitespace().next()).and_then(|e| e.parse().ok()).unwrap_or_else(|| panic!("{stderr}"));
    assert!(error < 1e-5, "{stderr}");
    let graph: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let ops: Vec<&str> = graph["nodes"].as_array().unwrap().iter().map(|n| n["op"].as_str().unwrap()).collect();
    assert!(ops.iter().all(|op| !["aten::mul", "aten::add", "aten::div", "aten::sub"].contains(op)), "{ops:?}");
}

#[test]
fn a_torchscript_file_with_the_wrong_inputs_gets_one_line_naming_what_it_expected() {
    let file = torchscript_fixture("multi_input.pt");
    let file = file.to_str().unwrap();
    let ids = ["--input", "2x5:int64:0:100"];
    let rest = ["--input", "2x5:bool", "--input", "2x5x16", "--input", "2x5:int32:0:5"];
    let with = |first: &[&'static str]| -> Vec<&str> {
        let mut arguments = vec!["export-graph", "--torchscript", file];
        arguments.extend(first);
        arguments
    };
    let mut float_ids = with(&["--input", "2x5"]);
    float_ids.extend(rest);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (with(&ids), "forward takes 4 inputs (ids: Tensor, mask: Tensor, features: Tensor, positions: Tensor), got 1 --input"),
        (float_ids, "expected tensor for argument #1 'indices' to have one of the following scalar types: long, int"),
        (vec!["export-graph", "--torchscript", "/nonexistent/model.pt", "--input", "1x3"], "no such file"),
        (vec!["export-graph", "--torchscript", file], "needs one --input"),
        (vec!["export-graph", "--torchscript", file, "--input", "2x5:int99"], "unknown dtype `int99`"),
        (vec!["export-graph", "--model", "resnet50", "--input", "2x5"], "--torchscript"),
        (vec!["export-graph", "--model", "resnet50", "--torchscript", file, "--input", "2x5"], "cannot be used with"),
        (vec!["infer", "--torchscript", file, "--input", "1x3", "--dtype", "int64"], "not a floating-point dtype"),
        (vec!["export-graph", "--model", "resnet50", "--check"], "add --optimize"),
    ];
    for (arguments, says) in cases {
        let output = nimble_bench(&arguments);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert!(stderr.starts_with("error:") && stderr.to_lowercase().contains(&says.to_lowercase()), "{arguments:?}: {stderr}");
        let error_lines = stderr.lines().filter(|line| line.starts_with("error:")).count();
        assert_eq!(error_lines, 1, "{arguments:?}: {stderr}");
    }
}

#[test]
fn zoo_models_convert_to_bfloat16_and_export_their_task_graph() {
    let out = scratch("mobilenet-bf16.graph.json");
    let output = nimble_bench(&["export-graph", "--model", "mobilenet-v2", "--dtype", "bfloat16", "--optimize", "--out", out.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let graph: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert!(graph["nodes"].as_array().unwrap().len() > 50, "{graph}");
}

/// What `--torchscript` names is checked for what it is: a missing file, a directory and a
/// device each get their own reason (all three were "no such file").
#[test]
fn a_torchscript_path_that_is_no_file_says_what_it_is() {
    for (path, reason) in [("/nonexistent/model.pt", "no such file"), ("/tmp", "a directory"), ("/dev/zero", "not a regular file")] {
        let output = nimble_bench(&["export-graph", "--torchscript", path, "--input", "1x3"]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{path}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(errors.len() == 1 && errors[0].contains(reason) && errors[0].len() < 300, "{path}: {stderr}");
    }
}

/// libtorch's errors are one line: an allocation larger than the machine (under a 4 GB
/// address-space limit), a size that overflows, a weights file that is not one. Each was a
/// panic with kilobytes of C++ frames; NIMBLE_VERBOSE=1 still prints them.
#[test]
fn libtorch_errors_are_one_line_without_their_frames() {
    let binary = env!("CARGO_BIN_EXE_nimble-bench");
    let weights = scratch("random-weights.ot");
    std::fs::write(&weights, (0..5000u32).map(|i| (i.wrapping_mul(2654435761) >> 24) as u8).collect::<Vec<u8>>()).unwrap();
    let probes = [
        format!("ulimit -v 4000000; exec {binary} export-graph --model resnet50 --batch 100000"),
        format!("exec {binary} export-graph --model resnet50 --batch 9223372036854775807"),
        format!("exec {binary} export-graph --model resnet50 --weights {}", weights.display()),
    ];
    for probe in &probes {
        let output = Command::new("sh").args(["-c", probe]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{probe}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        assert!(lines.len() == 1 && lines[0].starts_with("error:") && lines[0].chars().count() < 300, "{probe}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("frame #"), "{probe}: {stderr}");
    }
    let verbose = Command::new("sh").args(["-c", &probes[2]]).env("NIMBLE_VERBOSE", "1").output().unwrap();
    assert!(String::from_utf8_lossy(&verbose.stderr).contains("frame #"));
}
