//! The command line as a user meets it: output formats, files written, and one-line errors with
//! exit status 2 for every kind of bad input.

mod common;

use std::path::PathBuf;
#[cfg(feature = "torch")]
use std::process::Command;

use common::{nimble_bench, scratch, stdout, write};

#[test]
fn assign_json_has_the_documented_fields() {
    let path = write("diamond.json", r#"{"nodes":[{"id":5,"op":"a"},{"id":6,"op":"b"},{"id":7,"op":"c"},{"id":8,"op":"d"}],"edges":[[5,6],[5,7],[6,8],[7,8],[5,8]]}"#);
    let text = stdout(&nimble_bench(&["assign", "--graph", path.to_str().unwrap(), "--algo", "nimble", "--json"]));
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    for field in ["algorithm", "nodes", "edges", "meg_edges", "streams", "syncs", "stream_of", "order", "sync_edges", "assign_ms"] {
        assert!(value.get(field).is_some(), "missing {field} in {text}");
    }
    assert_eq!((value["nodes"].as_u64(), value["edges"].as_u64(), value["meg_edges"].as_u64()), (Some(4), Some(5), Some(4)));
    assert_eq!(value["streams"], 2);
    assert_eq!(value["syncs"], 2);
    assert_eq!(value["order"][0], 5);
    assert_eq!(value["sync_edges"].as_array().unwrap().len(), 2);
}

#[test]
fn bad_input_gives_one_line_and_status_2() {
    let malformed = write("malformed.json", "{\"nodes\":[\n  {\"id\":1,\"op\":\"a\"},\n  {\"id\":2 \"op\":\"b\"}]}");
    let cycle = write("cycle.json", r#"{"nodes":[{"id":1,"op":"a"},{"id":2,"op":"b"}],"edges":[[1,2],[2,1]]}"#);
    let unknown = write("unknown.json", r#"{"nodes":[{"id":1,"op":"a"}],"edges":[[1,3]]}"#);
    let duplicate = write("duplicate.json", r#"{"nodes":[{"id":1,"op":"a"},{"id":1,"op":"b"}]}"#);
    let missing = scratch("does-not-exist.json");
    let negative = write("negative.json", r#"{"nodes":[{"id":1,"op":"a","duration_us":2},{"id":9,"op":"b","duration_us":-5}],"edges":[[1,9]]}"#);
    let huge = write("huge.json", r#"{"nodes":[{"id":4,"op":"a","duration_us":1e308}]}"#);
    let share = write("share.json", r#"{"nodes":[{"id":7,"op":"a","attrs":{"sm_share":1.5}}]}"#);
    let empty = write("empty.json", r#"{"nodes":[]}"#);
    let scaling_out = scratch("scaling-slow").to_str().unwrap().to_string();
    let sim = |name: &str, text: &str| write(name, text).to_str().unwrap().to_string();
    let (min_share, negative_latency, huge_launch, no_kernels) = (
        sim("min-share.json", r#"{"min_sm_share": 5}"#),
        sim("negative-latency.json", r#"{"graph_dependency_latency_us": -1}"#),
        sim("huge-launch.json", r#"{"graph_launch_us": -1e308}"#),
        sim("no-kernels.json", r#"{"max_concurrent_kernels": 0}"#),
    );
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["simulate", "--graph", negative.to_str().unwrap()], "node 9: duration_us is -5, expected a finite number"),
        (vec!["simulate", "--graph", huge.to_str().unwrap()], "node 4: duration_us is 1e308, expected"),
        (vec!["compare", "--graph", share.to_str().unwrap()], "node 7: sm_share is 1.5, expected a number in (0, 1]"),
        (vec!["assign", "--synthetic", "fan:1000000:1000"], "it has 1,000,000,002 nodes, more than 100000"),
        (vec!["assign", "--graph", "/dev/zero"], "larger than 64 MiB"),
        (vec!["assign", "--graph", malformed.to_str().unwrap()], "line 3, column"),
        (vec!["assign", "--graph", cycle.to_str().unwrap()], "cycle in task graph through node"),
        (vec!["assign", "--graph", unknown.to_str().unwrap()], "unknown node id 3"),
        (vec!["simulate", "--graph", duplicate.to_str().unwrap()], "duplicate node id 1"),
        (vec!["dot", "--graph", missing.to_str().unwrap()], "No such file"),
        (vec!["assign", "--synthetic", "fan:2", "--algo", "nimbel"], "unknown algorithm `nimbel`"),
        (vec!["assign", "--synthetic", "fan:2", "--algo", "round-robin:zero"], "invalid argument"),
        (vec!["compare", "--synthetic", "tree:3"], "unknown family"),
        (vec!["simulate", "--synthetic", "fan:2", "--sm-share", "1.5"], "--sm-share"),
        // Simulator parameters outside their ranks: each named, with its range.
        (vec!["simulate", "--synthetic", "fan:2", "--sim-config", &min_share], "`min_sm_share` is 5: expected a share of the GPU in [0, 1]"),
        (vec!["compare", "--synthetic", "fan:2", "--sim-config", &negative_latency], "`graph_dependency_latency_us` is -1"),
        (vec!["simulate", "--synthetic", "fan:2", "--sim-config", &huge_launch], "`graph_launch_us` is -1e308"),
        (vec!["simulate", "--synthetic", "fan:2", "--sim-config", &no_kernels], "`max_concurrent_kernels` is 0"),
        (vec!["simulate", "--synthetic", "fan:2", "--mode", "eager", "--launch-us", "1e308"], "`eager_launch_us` is 1e308"),
        // Smaller ones: an empty graph, no algorithm, a size past u64.
        (vec!["simulate", "--graph", empty.to_str().unwrap()], "the task graph has no nodes"),
        (vec!["compare", "--synthetic", "fan:2", "--algos", ",,,"], "names no algorithm"),
        (vec!["assign", "--synthetic", "dnn:18446744073709551616"], "is too large"),
        // Every file a command reads is bounded.
        (vec!["schedulers", "--simulate", "--measured", "/dev/zero"], "larger than 64 MiB"),
        (vec!["calibrate-simulator", "--results", "/dev/zero"], "larger than 64 MiB"),
        (vec!["same-process", "--results", "/dev/zero"], "larger than 64 MiB"),
        // No panic: an optimizer too slow to price.
        (
            vec![
                "scaling",
                "--results",
                "../paper-figs/results/scaling/scaling-283e232.json",
                "--ddp",
                "../paper-figs/results/scaling/pytorch-ddp-283e232.json",
                "--graphs",
                "../paper-figs/results/scaling-graphs-283e232",
                "--allreduce",
                "../paper-figs/results/scaling/allreduce-283e232.json",
                "--optimizer-gbs",
                "0.00001",
                "--out-dir",
                &scaling_out,
            ],
            "cannot be priced",
        ),
    ];
    for (arguments, expected) in cases {
        let output = nimble_bench(&arguments);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(expected), "{arguments:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{arguments:?}: {stderr}");
        assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"));
    }
    let usage = nimble_bench(&["assign"]);
    assert_eq!(usage.status.code(), Some(2), "missing graph source is a usage error");
}

#[test]
fn generated_graphs_feed_every_command() {
    let graph = scratch("nasnet.json");
    stdout(&nimble_bench(&["gen", "--synthetic", "nasnet:3", "--out", graph.to_str().unwrap()]));
    let path = graph.to_str().unwrap();

    let algos = stdout(&nimble_bench(&["algos"]));
    assert!(algos.lines().count() >= 6 && algos.contains("round-robin:K"));

    let table = stdout(&nimble_bench(&["compare", "--graph", path]));
    for line in algos.lines() {
        let name = line.split_whitespace().next().unwrap().trim_end_matches(":K");
        assert!(table.contains(name), "{name} missing from compare:\n{table}");
    }

    let trace = scratch("trace.json");
    let simulated = stdout(&nimble_bench(&["simulate", "--graph", path, "--mode", "eager", "--json", "--trace", trace.to_str().unwrap()]));
    let simulated: serde_json::Value = serde_json::from_str(&simulated).unwrap();
    assert!(simulated["makespan_us"].as_f64().unwrap() > 0.0);
    assert!(simulated["single_makespan_us"].as_f64().unwrap() >= simulated["makespan_us"].as_f64().unwrap());
    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(trace).unwrap()).unwrap();
    assert!(trace["traceEvents"].as_array().unwrap().len() > 100);

    let dot = stdout(&nimble_bench(&["dot", "--graph", path, "--algo", "greedy"]));
    assert!(dot.starts_with("digraph") && dot.contains("greedy"));
}

/// A slice of the committed GPU record (small graphs only), written where the commands can read it.
fn small_record() -> PathBuf {
    let committed = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results/simulator-validation.json");
    let mut record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(committed).unwrap()).unwrap();
    let runs = record["runs"].as_array_mut().unwrap();
    runs.retain(|r| ["fan:8:8", "chain:200", "fan:16:1"].contains(&r["graph"].as_str().unwrap()));
    assert!(runs.len() >= 30);
    write("small-record.json", &record.to_string())
}

#[test]
fn simulator_report_and_calibration_work_from_a_record() {
    let record = small_record();
    let svg = scratch("validation.svg");
    let report = stdout(&nimble_bench(&["simulator-report", "--results", record.to_str().unwrap(), "--svg", svg.to_str().unwrap()]));
    assert!(report.contains("measured on NVIDIA") && report.contains("median |simulated − measured|"), "{report}");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));

    let fitted_path = scratch("fitted.json");
    let output = nimble_bench(&["calibrate-simulator", "--results", record.to_str().unwrap(), "--out", fitted_path.to_str().unwrap()]);
    let calibration = stdout(&output);
    assert!(String::from_utf8_lossy(&output.stderr).contains("median |error|: graph"), "{calibration}");
    // Stdout is the config alone, as --out writes it: `> cal.json` reads back with --sim-config.
    assert_eq!(calibration.trim_end(), std::fs::read_to_string(&fitted_path).unwrap().trim_end());
    let fitted: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&fitted_path).unwrap()).unwrap();
    for key in ["eager_launch_us", "graph_dependency_latency_us", "dispatch_us", "max_concurrent_kernels"] {
        assert!(fitted.get(key).is_some(), "{key} missing");
    }
    // The fitted parameters feed back into the simulator.
    let simulated = stdout(&nimble_bench(&["simulate", "--synthetic", "fan:8:8", "--sim-config", fitted_path.to_str().unwrap(), "--json"]));
    assert!(serde_json::from_str::<serde_json::Value>(&simulated).unwrap()["makespan_us"].as_f64().unwrap() > 0.0);

    let unknown = write("unknown-parameter.json", r#"{"warp_speed": 9}"#);
    let output = nimble_bench(&["simulate", "--synthetic", "fan:2", "--sim-config", unknown.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown simulator parameter `warp_speed`"));

    // An empty or unusable record is an error, not NaN% or 71251%.
    let mut value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    let mut empty = value.clone();
    empty["runs"] = serde_json::json!([]);
    value["runs"][0]["measured"]["median_us"] = serde_json::json!(-3.0);
    let cases = [(write("no-runs.json", &empty.to_string()), "the record has no runs"), (write("negative-time.json", &value.to_string()), "expected a positive time")];
    for (path, expected) in &cases {
        for command in ["simulator-report", "calibrate-simulator"] {
            let output = nimble_bench(&[command, "--results", path.to_str().unwrap()]);
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
            assert!(stderr.contains(expected) && !String::from_utf8_lossy(&output.stdout).contains("NaN"), "{command}: {stderr}");
        }
    }
}

#[test]
fn gpu_commands_say_there_is_no_gpu() {
    if std::path::Path::new("/proc/driver/nvidia/version").exists() {
        eprintln!("notice: a GPU driver is present; the no-GPU error is not exercised here");
        return;
    }
    let output = nimble_bench(&["synth", "--synthetic", "fan:2"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).starts_with("error: no CUDA GPU available"));
    if cfg!(feature = "torch") {
        let output = nimble_bench(&["profile", "--model", "efficientnet-b0"]);
        assert_eq!(output.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&output.stderr).starts_with("error: profile needs a CUDA device"), "{}", String::from_utf8_lossy(&output.stderr));
    }
}

/// Built without libtorch, the commands that run models say so and how to get them; the
/// scheduling commands and the figures re-rendered from records work.
#[cfg(not(feature = "torch"))]
#[test]
fn without_libtorch_the_model_commands_say_which_feature_they_need() {
    for args in [&["infer", "--model", "resnet50"][..], &["models"], &["export-graph", "--model", "resnet50"], &["profile"], &["train"], &["coverage", "/nonexistent"]] {
        let output = nimble_bench(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains("the `torch` feature") && stderr.lines().count() == 1, "{args:?}: {stderr}");
    }
    let help = stdout(&nimble_bench(&["--help"]));
    assert!(help.contains("without the `torch` feature"), "{help}");
}

#[cfg(feature = "torch")]
#[test]
fn profile_checks_its_arguments_before_looking_for_a_gpu() {
    for (args, message) in [
        (&["--model", "resnet50,mobilenet-v2"][..], "--model names one model, got resnet50,mobilenet-v2"),
        (&["--model", "resnet51"][..], "resnet51"),
        (&["--mode", "torchscript"][..], "--mode torchscript is not profiled"),
        (&["--runs", "0"][..], "--runs must be at least 1"),
    ] {
        let output = nimble_bench(&[&["profile"][..], args].concat());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn fig5_re_renders_the_committed_inference_record_without_a_gpu() {
    let out_dir = scratch("figures");
    let results = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results/inference.json");
    let output = nimble_bench(&["fig5", "--from-results", "--results", results.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()]);
    let text = stdout(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("fig5: inference speedup") && stderr.contains("re-rendering from"), "{stderr}");
    // Where and when the numbers were measured, then one line per model.
    assert!(text.starts_with("measured: NVIDIA H200 (driver 580.159.04"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("nasnet-a-mobile")), "{text}");
    let svg = std::fs::read_to_string(out_dir.join("inference.svg")).unwrap();
    assert!(svg.contains("nasnet-a-mobile") && svg.contains("Nimble (multi-stream)"), "the figure lacks its labels");
    // The paper's other baselines are named as not shown, not drawn.
    assert!(svg.contains("Not shown: TensorRT, TVM."), "the figure does not say which baselines it lacks");
    // The Python runner's records beside the inference record add the PyTorch systems.
    assert!(svg.contains("PyTorch eager") && svg.contains("torch.compile"), "the figure lacks the PyTorch baselines");
    assert!(text.contains("PyTorch columns from torch 2.11.0"), "{text}");
    // Each Python record's own date (eager/TorchScript and torch.compile ran at different times).
    assert!(text.contains("baselines 2026-") && text.contains("compile 2026-"), "{text}");
}

#[test]
fn every_figure_is_listed_and_fig2a_re_renders_the_overhead_figure() {
    let text = stdout(&nimble_bench(&["figures"]));
    for name in ["overhead", "inference", "training", "multistream", "algorithm-example", "schedulers"] {
        assert!(text.lines().any(|l| l.starts_with(name)), "{name} missing: {text}");
    }
    assert!(!text.contains("not yet"), "{text}");
    let out_dir = scratch("overhead-figure");
    let results = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results/schedulers.json");
    for figure in ["fig2a", "multistream", "schedulers"] {
        let output = nimble_bench(&[figure, "--from-results", "--results", results.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()]);
        let text = stdout(&output);
        assert!(text.starts_with("measured: NVIDIA H200"), "{figure}: {text}");
        assert!(text.lines().any(|l| l.starts_with("nasnet-a-mobile")), "{figure}: {text}");
    }
    for svg in ["overhead.svg", "multistream.svg", "schedulers.svg"] {
        let svg = std::fs::read_to_string(out_dir.join(svg)).unwrap();
        assert!(svg.contains("nasnet-a-mobile"), "the figure lacks its labels");
    }
}

#[test]
fn the_algorithm_example_is_drawn_from_nimble_scheds_steps() {
    let out_dir = scratch("algorithm-example");
    let text = stdout(&nimble_bench(&["algorithm-example", "--out-dir", out_dir.to_str().unwrap()]));
    // The built-in example: 10 tasks whose 4 chains merge into 3 streams (its width).
    assert!(text.contains("1. task graph: 10 tasks, 15 edges, width 3"), "{text}");
    assert!(text.contains("2. MEG: 13 edges (2 implied edges dropped)"), "{text}");
    assert!(text.contains("4. chains: 0→1→4→6→7→9, 2→5, 3, 8"), "{text}");
    assert!(text.contains("5. streams: 0→1→4→6→7→9; 2→5 | 8; 3;"), "{text}");
    let svg = std::fs::read_to_string(out_dir.join("algorithm-example.svg")).unwrap();
    let png = std::fs::read(out_dir.join("algorithm-example.png")).unwrap();
    assert!(png.starts_with(b"\x89PNG") && png.len() > 10_000, "no PNG beside the SVG");
    assert!(svg.contains("minimum equivalent graph") && svg.contains("3 streams (1 chains merged)"), "the figure lacks its captions");
    let output = nimble_bench(&["algorithm-example", "--synthetic", "chain:40", "--out-dir", out_dir.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("1 to 24 nodes legibly; this one has 40"));
}

#[test]
fn training_re_renders_the_committed_training_record_without_a_gpu() {
    let out_dir = scratch("training-figure");
    let results = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results/training.json");
    let output = nimble_bench(&["training", "--from-results", "--results", results.to_str().unwrap(), "--out-dir", out_dir.to_str().unwrap()]);
    let text = stdout(&output);
    assert!(text.starts_with("measured: NVIDIA H200 (driver 580.159.04"), "{text}");
    // The Python runner's record beside it adds PyTorch's two columns; then one line per model
    // and batch size: the eager time and six speedups (PyTorch's two, then ours).
    assert!(text.contains("PyTorch columns from torch 2.11.0"), "{text}");
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with("mobilenet-v2")).collect();
    assert_eq!(lines.len(), 3, "{text}");
    let cells: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(cells.len(), 9, "{text}");
    let speedup = |i: usize| cells[i].parse::<f64>().unwrap();
    assert!(speedup(4) > 1.0 && speedup(8) > 1.0, "{text}");
    let svg = std::fs::read_to_string(out_dir.join("training.svg")).unwrap();
    assert!(svg.contains("mobilenet-v2 32") && svg.contains("whole step, one-stream CUDA graph"), "the figure lacks its labels");
    assert!(svg.contains("torch.cuda.graph"), "the figure lacks the PyTorch bars");
}

#[cfg(feature = "torch")]
#[test]
fn train_refuses_bad_arguments_before_touching_a_gpu() {
    let output = nimble_bench(&["train", "--model", "nasnet-a-large"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a training model"), "{}", String::from_utf8_lossy(&output.stderr));
    let output = nimble_bench(&["train", "--mode", "eager,fast"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unknown training mode `fast`"), "{}", String::from_utf8_lossy(&output.stderr));
}

#[cfg(feature = "torch")]
#[test]
fn data_parallel_training_refuses_bad_arguments_and_ranks_without_a_launcher() {
    let stderr = |args: &[&str], env: &[(&str, &str)]| {
        let output = Command::new(env!("CARGO_BIN_EXE_nimble-bench")).args(args).envs(env.iter().copied()).output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {output:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let e = stderr(&["train", "--gpus", "64", "--model", "resnet50"], &[]);
    assert!(e.contains("--gpus 64 asks for 64 GPUs, but this machine has"), "{e}");
    let e = stderr(&["train", "--gpus", "0"], &[]);
    assert!(e.contains("expected at least one GPU"), "{e}");
    let e = stderr(&["train", "--gpus", "1", "--bucket-mb", "0"], &[]);
    assert!(e.contains("--bucket-mb is 0, expected a positive number of MiB"), "{e}");
    let e = stderr(&["train", "--gpus", "1", "--pack-below-mb=-1"], &[]);
    assert!(e.contains("--pack-below-mb is -1, expected a number of MiB, 0 or more"), "{e}");
    let e = stderr(&["train", "--gpus", "2", "--one-gpu-rank"], &[]);
    assert!(e.contains("--one-gpu-rank changes how the one-GPU step is measured, but --gpus has no 1"), "{e}");
    let e = stderr(&["train-rank", "--model", "resnet50", "--batch", "32", "--out", "/tmp/rank.json"], &[]);
    assert!(e.contains("which sets NIMBLE_RANK; it is not set"), "{e}");
    let e = stderr(&["train-rank", "--model", "resnet50", "--batch", "32", "--out", "/tmp/rank.json"], &[("NIMBLE_RANK", "0"), ("NIMBLE_WORLD_SIZE", "two")]);
    assert!(e.contains("NIMBLE_WORLD_SIZE is `two`, expected a number"), "{e}");
    let e = stderr(&["train-rank", "--model", "resnet50", "--batch", "32", "--out", "/tmp/rank.json"], &[("NIMBLE_RANK", "0"), ("NIMBLE_WORLD_SIZE", "2"), ("NIMBLE_NCCL_ID", "abc")]);
    assert!(e.contains("NCCL id: 3 characters; expected the 256 hex digits"), "{e}");
    let id = "ab".repeat(128);
    let e = stderr(&["train-rank", "--model", "resnet50", "--batch", "32", "--out", "/tmp/rank.json"], &[("NIMBLE_RANK", "2"), ("NIMBLE_WORLD_SIZE", "2"), ("NIMBLE_NCCL_ID", &id)]);
    assert!(e.contains("rank 2 in a group of 2"), "{e}");
}

/// One answer per graph: `simulate`, `compare` and `schedulers --simulate` give the same makespan
/// for the same committed graph, algorithm and mode (they decide the simulator's parameters the
/// same way: the kernel-timed calibration here), and every output names the calibration. On
/// NASNet-A mobile `simulate` gave 827.9 µs where `compare` gave 988.1.
#[test]
fn every_command_gives_one_simulated_answer_per_graph() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results/model-graphs");
    let results = scratch("one-answer.json");
    let figures = scratch("one-answer-figures");
    let algorithms = ["nimble", "greedy"];
    stdout(&nimble_bench(&["schedulers", "--simulate", "--graphs", dir.to_str().unwrap(), "--algos", &algorithms.join(","), "--measured", "none", "--results", results.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]));
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    let mut checked = 0;
    for model in record["models"].as_array().unwrap() {
        let graph = dir.join(model["file"].as_str().unwrap());
        let graph = graph.to_str().unwrap();
        let compared: serde_json::Value = serde_json::from_str(&stdout(&nimble_bench(&["compare", "--graph", graph, "--algos", &algorithms.join(","), "--json"]))).unwrap();
        assert_eq!(compared["calibration"], "kernel-timed-h200", "{graph}");
        for (k, algorithm) in algorithms.iter().enumerate() {
            let simulated: serde_json::Value = serde_json::from_str(&stdout(&nimble_bench(&["simulate", "--graph", graph, "--algo", algorithm, "--json"]))).unwrap();
            assert_eq!(simulated["calibration"], "kernel-timed-h200", "{graph}");
            let from_simulate = simulated["makespan_us"].as_f64().unwrap();
            let from_compare = compared["algorithms"][k]["graph_makespan_us"].as_f64().unwrap();
            let from_schedulers = model["rows"][k]["graph_makespan_us"].as_f64().unwrap();
            assert_eq!(model["rows"][k]["algorithm"], *algorithm);
            assert!(from_simulate == from_compare && from_compare == from_schedulers, "{graph} {algorithm}: simulate {from_simulate}, compare {from_compare}, schedulers --simulate {from_schedulers}");
            checked += 1;
        }
    }
    assert_eq!(checked, 20);
}

/// `schedulers --simulate` names the calibration beside the GPU the graphs were timed on, and
/// says when it is not that GPU's: the fused-kernel graphs were timed on an H100, and only
/// H200s have fitted calibrations; the zoo's graphs were timed on an H200.
#[test]
fn schedulers_simulate_says_whose_calibration_it_used() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for (set, expected) in [
        ("fused-kernel-graphs", "calibration: an H200's, not NVIDIA H100 80GB HBM3's, on which the graphs were timed (none is fitted for it)"),
        ("model-graphs", "simulated with the kernel-timed-h200 calibration: an H200's, the GPU the graphs were timed on (NVIDIA H200)"),
    ] {
        let results = scratch(&format!("whose-calibration-{set}.json"));
        let figures = scratch(&format!("whose-calibration-{set}"));
        let graphs = root.join("paper-figs/results").join(set);
        let text = stdout(&nimble_bench(&["schedulers", "--simulate", "--graphs", graphs.to_str().unwrap(), "--algos", "nimble", "--measured", "none", "--results", results.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]));
        assert!(text.lines().next().unwrap().contains(expected), "{set}: {text}");
        let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
        assert!(record["calibration"].as_str().unwrap().contains(expected), "{set}: {record}");
    }
}

#[test]
fn a_reader_that_stops_early_ends_the_output_quietly() {
    // `nimble-bench ... | head`: once the reader closes the pipe the CLI ends as Unix tools do
    // (SIGPIPE), not with a panic about printing. The graph printed is larger than a pipe holds.
    use std::io::Read;
    use std::process::Stdio;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nimble-bench"))
        .args(["gen", "--synthetic", "nasnet:60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let mut first = [0u8; 64];
    child.stdout.as_mut().unwrap().read_exact(&mut first).unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(output.status.signal(), Some(13), "ended by SIGPIPE: {:?} {stderr}", output.status);
    }
}

#[test]
fn an_argument_that_is_not_utf8_is_one_error_line_not_a_panic() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let name = OsStr::from_bytes(b"\xff\xfe.json");
    for arguments in [vec![OsStr::new("assign"), OsStr::new("--graph"), name], vec![name], vec![OsStr::new("compare"), OsStr::new("--synthetic"), name]] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_nimble-bench")).args(&arguments).output().expect("the binary runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{arguments:?}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(errors.len() == 1 && errors[0].len() < 300, "{arguments:?}: {stderr}");
    }
}

#[test]
fn a_negative_number_after_a_space_is_read_as_the_flags_value_and_refused_by_its_range() {
    // Read as a flag, `-0.1` was "unexpected argument '-0' found"; as a value, the flag's own
    // check names the flag and the range.
    for (flag, value) in [("--sm-share", "-0.1"), ("--launch-us", "-1"), ("--launch-us", "-inf"), ("--max-concurrent", "-1"), ("--default-duration-us", "-1")] {
        let output = nimble_bench(&["simulate", "--synthetic", "nasnet:2", flag, value]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag} {value}: {stderr}");
        assert!(!stderr.contains("unexpected argument") && !stderr.contains("panicked"), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag.trim_start_matches('-')) || stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}

/// The probes of the hardening issue that a re-render accepted, or refused without saying why:
/// each is status 2, one `error:` line under 300 characters naming the valid range or the path,
/// no panic.
#[test]
fn bad_models_batches_and_gpu_counts_are_refused_with_the_valid_range() {
    let table: [(&[&str], &str); 11] = [
        (&["inference", "--models", "bogus"], "expected `all` or some of resnet50"),
        (&["inference", "--models", ""], "expected `all`"),
        (&["inference", "--models", ","], "expected `all`"),
        (&["inference", "--models", "resnet50,bogus"], "`bogus` is not one of the models"),
        (&["training", "--models", "darts"], "training models"),
        (&["overhead", "--models", "bogus"], "expected `all`"),
        (&["multistream", "--models", "bogus"], "expected `all`"),
        (&["inference", "--batch", "0"], "1.."),
        (&["training", "--batch", "32,0"], "1.."),
        (&["scaling", "--sim-gpus", "18446744073709551615"], "from 1 to 4096"),
        // (a file where the figure's directory should be: the path named, not just "File exists")
        (&["algorithm-example", "--out-dir", "Cargo.toml"], "creating the figure directory Cargo.toml"),
    ];
    for (arguments, expected) in table {
        let output = nimble_bench(arguments);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
        assert!(errors.len() == 1 && errors[0].len() < 300 && errors[0].contains(expected), "{arguments:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{arguments:?}: {stderr}");
    }
}

/// SIGINT and SIGTERM end a command with 128 plus the signal's number, having removed the
/// temporary files of any write in progress (nimble_graph::files::remove_temporaries; its unit
/// test plants one): the exit goes through the CLI's own signal thread, not the default action.
#[test]
fn interrupts_end_with_the_signals_status_through_the_cleanup() {
    for (signal, status) in [("-TERM", 143), ("-INT", 130)] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_nimble-bench"))
            .args(["compare", "--synthetic", "dnn:30000"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("the binary runs");
        // (after libtorch has loaded: the signal thread starts in main)
        std::thread::sleep(std::time::Duration::from_secs(4));
        assert!(std::process::Command::new("kill").args([signal, &child.id().to_string()]).status().unwrap().success());
        assert_eq!(child.wait().unwrap().code(), Some(status), "{signal}");
    }
}
