//! The figures and tables re-rendered from committed records without a GPU: the simulated
//! schedulers on the committed task graphs, scaling, and every figure's defaults leaving
//! committed files as they are (the backend's records: records_backend.rs).

// Rendering needs no libtorch, so these run once, in the README's test command's build without
// default features: built with libtorch, each of the CLI's hundreds of renders loads it, and the
// records took 128 s of CI's time there against 56 s without (measured 2026-12-01).
#![cfg(not(feature = "torch"))]

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{nimble_bench, scratch, stdout};

#[test]
fn schedulers_simulate_runs_every_algorithm_on_the_committed_model_graphs_without_a_gpu() {
    let results = scratch("schedulers-simulated.json");
    let figures = scratch("figures");
    let output = nimble_bench(&[
        "schedulers",
        "--simulate",
        "--graphs",
        "../paper-figs/results/model-graphs",
        "--measured",
        "../paper-figs/results/schedulers.json",
        "--results",
        results.to_str().unwrap(),
        "--out-dir",
        figures.to_str().unwrap(),
    ]);
    let text = stdout(&output);
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    let models = record["models"].as_array().unwrap();
    assert!(models.iter().any(|m| m["model"] == "inception-v3"), "{text}");
    for m in models {
        let floor = m["floor_us"].as_f64().unwrap();
        let rows = m["rows"].as_array().unwrap();
        // Every registered algorithm, each no faster than the floor.
        assert!(rows.iter().any(|r| r["algorithm"] == "nimble") && rows.iter().any(|r| r["algorithm"] == "greedy"), "{m}");
        for r in rows {
            assert!(r["graph_makespan_us"].as_f64().unwrap() >= floor * 0.999, "{m}");
        }
    }
    assert!(figures.join("schedulers-simulated.svg").exists() && figures.join("schedulers-simulated.png").exists());
    // The simulator on the kernel-timed graphs against the same run's measurements: within
    // twice what the README publishes (median |error| 3.4%, worst -9.6%, over every zoo model
    // and algorithm), so a regression several times that fails.
    assert_eq!(models.len(), 10, "{text}");
    for m in models {
        assert!(m["simulator"]["min_sm_share"].as_f64().unwrap() > 0.0, "kernel-timed graphs get their calibration: {}", m["simulator"]);
    }
    let v = &record["validation"];
    assert_eq!(v["runs"], 60, "{v}");
    assert!(v["median_abs_error_pct"].as_f64().unwrap() <= 6.8 && v["worst_error_pct"].as_f64().unwrap().abs() <= 19.2, "{v}");
    assert!(text.contains("simulated against measured"), "{text}");
    // Chosen algorithms and models only.
    let chosen = stdout(&nimble_bench(&["schedulers", "--simulate", "--graphs", "../paper-figs/results/model-graphs", "--models", "resnet50", "--algos", "single,level", "--results", results.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]));
    assert!(chosen.contains("resnet50") && chosen.contains("level") && !chosen.contains("inception-v3") && !chosen.contains("greedy"), "{chosen}");
}

/// The research loop on the coverage set: 86 TorchScript models' kernel-timed graphs, committed
/// gzip-compressed with each model's measured one-stream and Nimble latencies, re-simulated here
/// under every registered algorithm without a GPU or libtorch.
#[test]
fn schedulers_simulate_covers_the_coverage_set_and_matches_its_measurements() {
    let results = scratch("coverage-simulated.json");
    let figures = scratch("coverage-figures");
    let dir = "../paper-figs/results/coverage-graphs";
    let measured = format!("{dir}/measured.json");
    let output = nimble_bench(&["schedulers", "--simulate", "--graphs", dir, "--measured", &measured, "--results", results.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]);
    let text = stdout(&output);
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    let models = record["models"].as_array().unwrap();
    assert_eq!(models.len(), 86, "{text}");
    for m in models {
        let floor = m["floor_us"].as_f64().unwrap();
        for r in m["rows"].as_array().unwrap() {
            assert!(r["graph_makespan_us"].as_f64().unwrap() >= floor * 0.999, "{m}");
        }
    }
    // One stream and Nimble measured per model; the simulator within twice the published median
    // (3.1%). The worst (EfficientNet-V2-S, +20.8%) is a model whose profiled kernels ran slower
    // than unprofiled ones (its floor exceeds its measured one-stream latency; the README says
    // so): bounded at 25%, 1.2 times it.
    let v = &record["validation"];
    assert_eq!(v["runs"], 172, "{v}");
    assert!(v["median_abs_error_pct"].as_f64().unwrap() <= 6.2 && v["worst_error_pct"].as_f64().unwrap().abs() <= 25.0, "{v}");
    assert!(figures.join("schedulers-validation.svg").exists(), "{text}");
}

/// The research loop on compiled models: Inductor's fused kernels of the same-process models
/// (torch.compile's kernels, each timed on an H100), committed with their provenance and
/// planned by every registered algorithm here without a GPU.
/// Without --out-dir the simulated figures go to target/figures, never over a committed figure;
/// with --out-dir paper-figs, another set of graphs draws under paper-figs/<its directory's name>/
/// (as the coverage set's committed figures are), never over the default graphs' figures.
#[test]
fn schedulers_simulate_leaves_the_committed_figures_alone() {
    let cwd = scratch("other-graphs-cwd");
    let _ = std::fs::remove_dir_all(&cwd);
    std::fs::create_dir_all(&cwd).unwrap();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results/fused-kernel-graphs");
    let arguments = ["schedulers", "--simulate", "--graphs", dir.to_str().unwrap(), "--models", "googlenet-float32", "--algos", "nimble,single", "--measured", "none"];
    let run = |extra: &[&str]| stdout(&Command::new(env!("CARGO_BIN_EXE_nimble-bench")).current_dir(&cwd).args(arguments).args(extra).output().expect("the binary runs"));
    run(&[]);
    assert!(cwd.join("target/figures/schedulers-simulated.svg").is_file());
    assert!(!cwd.join("paper-figs").exists(), "the default drew into paper-figs");
    run(&["--out-dir", "paper-figs"]);
    assert!(cwd.join("paper-figs/fused-kernel-graphs/schedulers-simulated.svg").is_file());
    assert!(!cwd.join("paper-figs/schedulers-simulated.svg").exists());
}

#[test]
fn schedulers_simulate_plans_the_committed_fused_kernel_graphs_with_every_algorithm() {
    let results = scratch("fused-simulated.json");
    let figures = scratch("fused-figures");
    let dir = "../paper-figs/results/fused-kernel-graphs";
    let output = nimble_bench(&["schedulers", "--simulate", "--graphs", dir, "--results", results.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]);
    let text = stdout(&output);
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
    let models = record["models"].as_array().unwrap();
    let provenance: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(format!("{dir}/provenance.json")).unwrap()).unwrap();
    assert_eq!(models.len(), provenance["graphs"].as_array().unwrap().len(), "{text}");
    assert_eq!(models.len(), 14, "{text}");
    let algorithms = nimble_sched::algorithms::ALGORITHMS.len();
    for m in models {
        let rows = m["rows"].as_array().unwrap();
        assert_eq!(rows.len(), algorithms, "{m}");
        let floor = m["floor_us"].as_f64().unwrap();
        let single = rows.iter().find(|r| r["algorithm"] == "single").unwrap()["graph_makespan_us"].as_f64().unwrap();
        for r in rows {
            let makespan = r["graph_makespan_us"].as_f64().unwrap();
            assert!(makespan >= floor * 0.999 && makespan <= single * 1.001, "{m}");
        }
    }
    // Inception-v3's branches stay branches after fusion: docs/research.md publishes Nimble's plan
    // at 2.00x one stream (597.4 against 1195.0 us); the simulation is deterministic.
    let inception = models.iter().find(|m| m["model"] == "inception-v3-float32").unwrap();
    let rows = inception["rows"].as_array().unwrap();
    let time = |name: &str| rows.iter().find(|r| r["algorithm"] == name).unwrap()["graph_makespan_us"].as_f64().unwrap();
    let speedup = time("single") / time("nimble");
    assert!((1.98..=2.02).contains(&speedup), "{speedup} {inception}");
    // docs/log.md: at batch 16 the critical path (the simulator's floor here; the record's,
    // written when the graphs were, must be the same) is 0.56, 0.46, 0.51 and 0.35 of
    // reduce-overhead's latency in the same process, the kernels' summed time 0.88, 0.70, 0.85, 0.88.
    let published = [("inception-v3", "0.56", "0.88"), ("googlenet", "0.46", "0.70"), ("inception-v4", "0.51", "0.85"), ("nasnet-a-large", "0.35", "0.88")];
    for (model, floor, busy) in published {
        let name = format!("{model}-float32-b16");
        let simulated = models.iter().find(|m| m["model"] == name.as_str()).unwrap();
        let entry = provenance["graphs"].as_array().unwrap().iter().find(|g| g["file"] == format!("{name}.graph.json").as_str()).unwrap();
        let latency_us = entry["reduce_overhead_ms"].as_f64().unwrap() * 1000.0;
        let critical = simulated["floor_us"].as_f64().unwrap();
        assert!((critical - entry["critical_path_us"].as_f64().unwrap()).abs() < 1e-6 * critical, "{name}: {critical} against {entry}");
        assert_eq!((format!("{:.2}", critical / latency_us), format!("{:.2}", entry["busy_us"].as_f64().unwrap() / latency_us)), (floor.to_string(), busy.to_string()), "{name}");
    }
}

#[test]
fn schedulers_simulate_says_what_is_missing() {
    let empty = scratch("no-graphs");
    std::fs::create_dir_all(&empty).unwrap();
    let untimed = scratch("untimed");
    std::fs::create_dir_all(&untimed).unwrap();
    std::fs::write(untimed.join("toy.graph.json"), r#"{"nodes":[{"id":0,"op":"a"},{"id":1,"op":"b"}],"edges":[[0,1]]}"#).unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["schedulers", "--simulate", "--graphs", empty.to_str().unwrap()], "no model task graphs (*.graph.json or *.graph.json.gz)"),
        (vec!["schedulers", "--simulate", "--graphs", untimed.to_str().unwrap()], "no node has a duration_us"),
        (vec!["schedulers", "--simulate", "--graphs", untimed.to_str().unwrap(), "--models", "bert"], "no task graph for model `bert`"),
        (vec!["schedulers", "--simulate", "--graphs", "../paper-figs/results/model-graphs", "--algos", "nimbel"], "unknown algorithm `nimbel`"),
    ];
    for (arguments, expected) in cases {
        let output = nimble_bench(&arguments);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{arguments:?}: {stderr}");
        assert!(stderr.starts_with("error: ") && stderr.contains(expected), "{arguments:?}: {stderr}");
    }
    let usage = nimble_bench(&["schedulers", "--algos", "nimble"]);
    assert_eq!(usage.status.code(), Some(2), "--algos without --simulate is a usage error");
}

#[test]
fn scaling_renders_the_committed_records_with_the_simulators_projection_and_names_a_bad_one() {
    let figures = scratch("scaling-figures");
    let results = "../paper-figs/results/scaling/scaling-283e232.json";
    let ddp = "../paper-figs/results/scaling/pytorch-ddp-283e232.json";
    let graphs = "../paper-figs/results/scaling-graphs-283e232";
    let allreduce = "../paper-figs/results/scaling/allreduce-283e232.json";
    let args = |graphs: &'static str| vec!["scaling", "--results", results, "--ddp", ddp, "--graphs", graphs, "--allreduce", allreduce, "--out-dir", figures.to_str().unwrap()];
    let output = nimble_bench(&args(graphs));
    let text = stdout(&output);
    assert!(output.status.success(), "{text}");
    let row = |model: &str, batch: &str, gpus: &str| -> Vec<String> {
        let found = text.lines().map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>()).find(|w| w.len() == 11 && w[0] == model && w[1] == batch && w[2] == gpus);
        found.unwrap_or_else(|| panic!("{model} {batch} {gpus}: {text}"))
    };
    // Every model, batch and measured GPU count with DDP's numbers beside Nimble's; the
    // simulator's 2-GPU prediction beside the measurement, re-simulated from the committed graphs
    // (within twice the published errors below); 4 and 8 GPUs simulated only.
    let mut errors = Vec::new();
    for model in ["resnet50", "mobilenet-v2"] {
        for batch in ["32", "64", "128"] {
            assert_ne!(row(model, batch, "1")[8], "-", "DDP graph on one GPU");
            let two = row(model, batch, "2");
            assert_ne!(two[8], "-");
            let error: f64 = two[7].trim_end_matches('%').parse().unwrap_or_else(|_| panic!("{two:?}"));
            // Twice the largest published cell error (4.6%, ResNet-50 at batch 64).
            assert!(error.abs() <= 9.2, "{model} {batch}: {error}% off");
            errors.push(error.abs());
            for gpus in ["4", "8"] {
                let simulated = row(model, batch, gpus);
                assert!(simulated[3] == "-" && simulated[5] != "-", "{simulated:?}");
            }
        }
    }
    errors.sort_by(f64::total_cmp);
    // Twice the published median (2.55%).
    assert!((errors[2] + errors[3]) / 2.0 <= 5.1, "median error {errors:?}");
    assert!(figures.join("scaling.svg").exists());
    // A DDP record with systems' failed rows (no samples): the others' numbers, the failed ones "-".
    let failed_rows = "../paper-figs/results/scaling/pytorch-ddp-517eaef.json";
    let output = nimble_bench(&args(graphs).iter().map(|&a| if a == ddp { failed_rows } else { a }).collect::<Vec<_>>());
    let text = stdout(&output);
    assert!(output.status.success(), "{text}");
    let one = text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|w| w.len() == 11 && w[..3] == ["resnet50", "32", "1"]).unwrap_or_else(|| panic!("{text}"));
    assert_eq!((one[8], one[9]), ("-", "1094"), "{text}");
    let output = nimble_bench(&["scaling", "--results", ddp, "--out-dir", figures.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("not a scaling record"), "{output:?}");
    let output = nimble_bench(&args("/nonexistent-graphs"));
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("reading the forward graph of resnet50 at batch 32"), "{output:?}");
}

/// Re-rendering every figure from its committed record, with the commands' defaults (the
/// simulated one with the algorithms its record names, so that registering one breaks nothing),
/// rewrites nothing: the committed figures are what today's code draws, and no record is rewritten (a
/// re-render of `schedulers --simulate` used to rewrite its record's machine-dependent
/// assignment times, and the committed training figure was stale). A changed file is put back
/// before the test fails, so the checkout stays clean.
#[test]
fn re_rendering_every_figure_with_its_defaults_changes_nothing_committed() {
    let failures = common::rerender_committed_figures();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A record other than a figure's committed one, re-rendered with the default --out-dir, draws
/// under `paper-figs/<its file stem>/`, never over the committed figure (run in a scratch
/// directory laid out as the checkout, so that the test beside it sees the checkout unchanged).
#[test]
fn another_records_figure_goes_beside_the_committed_one() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let checkout = scratch("elsewhere-checkout");
    let _ = std::fs::remove_dir_all(&checkout);
    std::fs::create_dir_all(checkout.join("paper-figs")).unwrap();
    let record = scratch("coverage-elsewhere.json");
    std::fs::copy(root.join("paper-figs/results/coverage/coverage-timm.json"), &record).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_nimble-bench")).args(["coverage", "--results", record.to_str().unwrap()]).current_dir(&checkout).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(checkout.join("paper-figs/coverage-elsewhere/coverage.svg").exists(), "{}", String::from_utf8_lossy(&output.stdout));
    assert!(!checkout.join("paper-figs/coverage.svg").exists(), "drawn where the committed figure lies");
}

/// No generated bytecode is committed (`__pycache__/` is ignored; one `.pyc` once slipped in).
#[test]
fn no_bytecode_is_committed() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let listed = match Command::new("git").args(["ls-files"]).current_dir(&root).output() {
        Ok(output) if output.status.success() => output,
        _ => {
            eprintln!("no_bytecode_is_committed: skipped, not a git checkout (or no git)");
            return;
        }
    };
    let bytecode: Vec<String> = String::from_utf8_lossy(&listed.stdout).lines().filter(|f| f.ends_with(".pyc") || f.contains("__pycache__/")).map(String::from).collect();
    assert!(bytecode.is_empty(), "committed bytecode: {bytecode:?}");
}

/// docs/research.md's table of the literature's policies against `nimble` (geometric mean, best
/// and worst graph, simulated) is what the simulator gives today on both committed graph sets,
/// to the table's three decimals, and its records hold the same latencies.
#[test]
fn the_literature_policies_table_is_what_the_simulator_gives() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let docs = std::fs::read_to_string(root.join("docs/research.md")).unwrap();
    let algorithms = "nimble,opara,torchsched,trt-llm,heft,ios,single";
    for (set, graphs, column) in [("zoo", "paper-figs/results/model-graphs", 1), ("fused-kernel", "paper-figs/results/fused-kernel-graphs", 4)] {
        let results = scratch(&format!("literature-{set}.json"));
        let figures = scratch(&format!("literature-{set}-figures"));
        let graphs = root.join(graphs);
        stdout(&nimble_bench(&["schedulers", "--simulate", "--algos", algorithms, "--graphs", graphs.to_str().unwrap(), "--measured", "none", "--results", results.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]));
        let fresh: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&results).unwrap()).unwrap();
        let committed_path = root.join(format!("paper-figs/results/literature-policies/{set}-simulated.json"));
        let committed: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(committed_path).unwrap()).unwrap();
        let latencies = |record: &serde_json::Value| -> Vec<(String, String, f64)> {
            let mut all = Vec::new();
            for m in record["models"].as_array().unwrap() {
                for r in m["rows"].as_array().unwrap() {
                    all.push((m["model"].as_str().unwrap().to_string(), r["algorithm"].as_str().unwrap().to_string(), r["graph_makespan_us"].as_f64().unwrap()));
                }
            }
            all
        };
        let (now, then) = (latencies(&fresh), latencies(&committed));
        assert_eq!(now.len(), then.len(), "{set}");
        for (a, b) in now.iter().zip(&then) {
            assert!(a.0 == b.0 && a.1 == b.1 && (a.2 - b.2).abs() <= 1e-6 * b.2, "{set}: {a:?} against the record's {b:?}");
        }
        for policy in ["opara", "torchsched:8", "trt-llm:3", "heft:4", "ios:12"] {
            let ratios: Vec<f64> = fresh["models"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| {
                    let time = |name: &str| m["rows"].as_array().unwrap().iter().find(|r| r["algorithm"] == name).unwrap()["graph_makespan_us"].as_f64().unwrap();
                    time(policy) / time("nimble")
                })
                .collect();
            let mean = (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp();
            let (best, worst) = ratios.iter().fold((f64::INFINITY, 0.0f64), |(b, w), &r| (b.min(r), w.max(r)));
            let row = docs.lines().find(|l| l.starts_with(&format!("| `{policy}` |")) && l.contains('×')).unwrap_or_else(|| panic!("no row for {policy}"));
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            assert_eq!(cells[column + 1], format!("{mean:.3}×"), "{set} {policy}: {row}");
            assert_eq!(cells[column + 2], format!("{best:.3}"), "{set} {policy}: {row}");
            assert_eq!(cells[column + 3], format!("{worst:.3}"), "{set} {policy}: {row}");
        }
    }
}

/// Records are grouped by experiment (the index lists the groups): at the top of
/// paper-figs/results/ lie only the index and the records the figure commands read by default.
#[test]
fn no_record_lies_loose_at_the_top_of_the_results() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results");
    let figures = ["inference", "training", "coverage", "schedulers", "schedulers-simulated", "simulator-validation", "simulator-holdout", "pytorch-baselines", "pytorch-compile", "pytorch-training"];
    let loose: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .filter(|name| name != "INDEX.md" && !figures.contains(&name.split('.').next().unwrap_or_default()))
        .collect();
    assert!(loose.is_empty(), "records at the top of paper-figs/results/: {loose:?}; expected them in their experiment's directory (INDEX.md lists the groups)");
}

/// The committed records index lists every file under paper-figs/results/ as the records say
/// today: adding, moving or removing a record without regenerating it fails here.
#[test]
fn the_records_index_is_in_step_with_the_files() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results");
    let generated = stdout(&nimble_bench(&["records-index", "--dir", dir.to_str().unwrap()]));
    let committed = std::fs::read_to_string(dir.join("INDEX.md")).unwrap();
    if generated.trim_end() != committed.trim_end() {
        let differing = generated.lines().zip(committed.lines()).find(|(a, b)| a != b).map_or("(one is longer)".to_string(), |(a, b)| format!("generated: {a}\ncommitted: {b}"));
        panic!("paper-figs/results/INDEX.md is out of step; run `nimble-bench records-index --out paper-figs/results/INDEX.md`\n{differing}");
    }
    // Every file is a row.
    let mut files = 0;
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().unwrap() != "INDEX.md" {
                files += 1;
            }
        }
    }
    assert_eq!(committed.lines().filter(|l| l.starts_with("| [")).count(), files);
}

/// docs/research.md's tables of the simulator against the backend's in-graph and whole-call
/// timings on the fused-kernel graphs with launch data are what `simulator-report --graphs`
/// prints today: the H100 set (every timing taken before the profiler ran) and the H200 set.
#[test]
fn the_fused_kernel_report_gives_the_published_errors() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let whole = root.join("paper-figs/results/same-process-backend");
    let report = |dir: &str| stdout(&nimble_bench(&["simulator-report", "--graphs", root.join(dir).to_str().unwrap(), "--whole-call", whole.to_str().unwrap()]));
    let h100 = report("paper-figs/results/fused-kernel-graphs-launches-h100");
    for line in [
        "one stream, in-graph, 14 graphs with launch data: median |error| 4.5%, worst -18.0%",
        "nimble's plan, in-graph, 14 graphs with launch data: median |error| 16.2%, worst -27.4%",
        "speedup, in-graph, 14 graphs with launch data: median |error| 8.5%, worst +27.4%",
        // The three parameters fitted on the other models' graphs: the issue's bounds (10%, 25%).
        "one stream, in-graph, fitted leave-one-model-out, 14 graphs of 10 models: median |error| 5.5%, worst +17.2%",
        "nimble's plan, in-graph, fitted leave-one-model-out, 14 graphs of 10 models: median |error| 6.7%, worst +17.5%",
        "speedup, in-graph, fitted leave-one-model-out, 14 graphs of 10 models: median |error| 3.4%, worst -22.8%",
        "fitted on every graph: dependency latency 0.5 µs (calibrated 0.4), between streams 5.25 µs (calibrated 0.8), least SM share 0.45 (calibrated 0.35)",
        r#"as --sim-config (schedulers --simulate, study): {"graph_dependency_latency_us":0.5,"graph_sync_latency_us":5.25,"min_sm_share":0.45}"#,
        // Every H100 same-process record of the directory, the newest of each cell.
        "whole call with the host term, leave-one-model-out, 14 graphs of 10 models: median |error| 20.5%, worst +42.9%",
        "an H200's, not NVIDIA H100 80GB HBM3's, on which the graphs were timed (none is fitted for it)",
    ] {
        assert!(h100.contains(line), "{line}\n{h100}");
    }
    assert!(!h100.contains("taken after the profiler"), "{h100}");
    // Each whole call names its record: the decoder's the newest H100 one (H200 records passed over).
    assert!(h100.lines().any(|l| l.starts_with("llama-bfloat16 ") && l.ends_with("same-process-backend-18b2146-bfloat16-b1-llama.json")), "{h100}");
    let h200 = report("paper-figs/results/fused-kernel-graphs-launches");
    for line in [
        "one stream, in-graph, 7 graphs with launch data: median |error| 9.8%, worst -21.3%",
        "nimble's plan, in-graph, 7 graphs with launch data: median |error| 27.2%, worst -40.2%",
        "nimble's plan, in-graph, fitted leave-one-model-out, 7 graphs of 5 models: median |error| 16.3%, worst -25.4%",
        "whole call with the host term, leave-one-model-out, 7 graphs of 5 models: median |error| 14.8%, worst +55.9%",
        "in-graph timings taken after the profiler ran in the same process",
    ] {
        assert!(h200.contains(line), "{line}\n{h200}");
    }
    assert!(h200.contains("simulated with the kernel-timed-h200 calibration: an H200's, the GPU the graphs were timed on"), "{h200}");
    assert!(h200.lines().any(|l| l.starts_with("googlenet-float32 ") && l.ends_with("same-process-backend-3821af1-float32-b1-googlenet-max-autotune.json")), "{h200}");
    // Graphs without in-graph timings are named, not compared; another GPU's records refused.
    let graphs = root.join("paper-figs/results/fused-kernel-graphs-launches");
    let occupancy = stdout(&nimble_bench(&["simulator-report", "--graphs", root.join("paper-figs/results/fused-kernel-graphs-occupancy").to_str().unwrap()]));
    assert!(occupancy.contains("nothing to compare: inception-v3-float32-b16"), "{occupancy}");
    let other_gpu = root.join("paper-figs/results/same-process-backend/771d13a/same-process-backend-771d13a-float32-b1-inception-v3.json");
    let refused = nimble_bench(&["simulator-report", "--graphs", graphs.to_str().unwrap(), "--whole-call", other_gpu.to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("expected records of the same GPU"));
}

/// `study` runs every policy over the three committed graph sets in one command and writes its
/// table's record, figure and provenance only into the directory it is given.
#[test]
fn the_study_writes_its_table_figure_and_record_where_told() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut before = std::collections::BTreeMap::new();
    common::snapshot(&root.join("paper-figs"), &mut before);
    let out = scratch("study-out");
    let _ = std::fs::remove_dir_all(&out);
    let output = Command::new(env!("CARGO_BIN_EXE_nimble-bench")).current_dir(&root).args(["study", "--algos", "nimble,heft,single", "--out-dir", out.to_str().unwrap()]).output().unwrap();
    let text = stdout(&output);
    for set in ["zoo", "coverage", "fused-kernel"] {
        for policy in ["nimble", "heft:4", "single"] {
            assert!(text.lines().any(|l| l.starts_with(set) && l.split_whitespace().nth(1) == Some(policy)), "{set} {policy}\n{text}");
        }
    }
    for file in ["study.json", "study.svg", "study.png"] {
        assert!(out.join(file).is_file(), "{file}");
    }
    let record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out.join("study.json")).unwrap()).unwrap();
    assert!(record["provenance"]["commit"].is_string() && record["sets"].as_array().unwrap().len() == 3);
    // The bands: the zoo's and the coverage set's medians against their measured records, the
    // fused kernels' the plan's in-graph error docs/research.md publishes (27.2%).
    let bands: Vec<f64> = record["sets"].as_array().unwrap().iter().map(|s| s["band_pct"].as_f64().unwrap()).collect();
    assert!((bands[2] - 16.2).abs() < 0.05 && bands[0] > 0.0 && bands[1] > 0.0, "{bands:?}");
    let mut after = std::collections::BTreeMap::new();
    common::snapshot(&root.join("paper-figs"), &mut after);
    assert!(before == after, "the study wrote under paper-figs/");
    let refused = nimble_bench(&["study", "--out-dir", root.join("README.md").to_str().unwrap()]);
    assert_eq!(refused.status.code(), Some(2));
}
