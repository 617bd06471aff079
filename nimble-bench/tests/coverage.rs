//! `nimble-bench coverage` without a GPU: re-rendering and merging records, and every error it
//! gives before it would look for one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use experiments::coverage::{CoverageRecord, ManifestEntry, ModelOutcome, Part, Status};
use experiments::record::Provenance;

fn nimble_bench(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nimble-bench")).args(arguments).output().expect("the binary runs")
}

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("nimble-bench-coverage-{}", std::process::id()));
    std::fs::create_dir_all(&directory).unwrap();
    directory.join(name)
}

fn entry(name: &str) -> ManifestEntry {
    ManifestEntry { name: name.into(), file: format!("{name}.pt"), source: "a test".into(), inputs: vec!["1x3x32x32:float32".into()], parameters: Some(1000), export_s: Some(0.1), error: None, weights: vec![] }
}

/// An `infer` record as the model's process writes it: eager 4 ms, graph 1 ms, Nimble 0.5 ms.
fn infer_record() -> serde_json::Value {
    let row = |mode: &str, optimized: bool, us: f64| {
        let mut row = serde_json::json!({"mode": mode, "optimized": optimized, "latency": {"samples_us": vec![us; 20]}});
        if mode != "eager" {
            row["relative_error"] = serde_json::json!(2e-7);
            row["reference_scale"] = serde_json::json!(3.0);
            row["input_sensitive"] = serde_json::json!(true);
            row["prepare"] = serde_json::json!({"streams": 4, "syncs": 3, "tasks": 120, "kernel_nodes": 130, "channels_last": true, "seconds": {"total": 0.3}});
        }
        row
    };
    serde_json::json!({"rows": [row("eager", false, 4000.0), row("graph", true, 1000.0), row("nimble", true, 500.0), row("graph", false, 1100.0), row("nimble", false, 600.0)]})
}

fn record(names: &[&str]) -> CoverageRecord {
    let part = Part {
        provenance: Provenance {
            gpu: "NVIDIA Test GPU".into(),
            compute_capability: "9.0".into(),
            multiprocessors: 132,
            driver_cuda_version: "13.0".into(),
            driver_version: Some("580.0".into()),
            date_utc: "2026-11-23T12:00:00Z".into(),
            commit: "0123456789abcdef".into(),
            warmup: 50,
            iterations: 100,
            method: "test".into(),
        },
        libtorch: "2.11.0".into(),
        precision: "float32".into(),
        exporter: serde_json::json!({"torch": "2.11.0+cu130", "device": "cuda", "batch": 1}),
        timeout_s: 300.0,
    };
    let models = names
        .iter()
        .map(|name| match *name {
            "sync" => ModelOutcome::failed(&entry(name), 0, Status::HostSync, "the forward synchronizes with the host at op #7 (aten::item, through x)".into(), 2.0),
            _ => ModelOutcome::from_infer_record(&entry(name), 0, &infer_record(), 5.0).unwrap(),
        })
        .collect();
    CoverageRecord::new(part, models)
}

fn write_record(name: &str, record: &CoverageRecord) -> PathBuf {
    let path = scratch(name);
    std::fs::write(&path, serde_json::to_string(record).unwrap()).unwrap();
    path
}

fn error_line(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "expected status 2: {}", String::from_utf8_lossy(&output.stdout));
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");
    stderr
}

#[test]
fn a_record_re_renders_as_a_table_and_a_figure() {
    let path = write_record("one.json", &record(&["resnet18", "sync", "vgg11"]));
    let figures = scratch("figures");
    let output = nimble_bench(&["coverage", "--results", path.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("2 of 3 models prepared and matched eager (66.7%; host-sync 1, ok 2)"), "{text}");
    assert!(text.contains("geometric-mean speedup over eager 8.00x, over its one-stream graph 2.00x"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("sync") && l.contains("host-sync") && l.contains("aten::item")), "{text}");
    for file in ["coverage.svg", "coverage.png"] {
        assert!(std::fs::metadata(figures.join(file)).is_ok_and(|m| m.len() > 1000), "{file} not drawn");
    }
    let svg = std::fs::read_to_string(figures.join("coverage.svg")).unwrap();
    assert!(svg.contains("resnet18 (4)") && svg.contains("host-sync: the forward synchronizes"), "labels missing from the figure");
}

#[test]
fn records_measured_in_parts_merge_into_one() {
    let a = write_record("part-a.json", &record(&["resnet18", "sync"]));
    let b = write_record("part-b.json", &record(&["vgg11"]));
    let merged = scratch("merged.json");
    let parts = format!("{},{}", a.display(), b.display());
    let figures = scratch("merged-figures");
    let output = nimble_bench(&["coverage", "--merge", &parts, "--results", merged.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let record: CoverageRecord = serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    assert_eq!((record.parts.len(), record.summary.population, record.models[2].part), (2, 3, 1));
    // The same model twice is refused, and nothing is written.
    let again = scratch("again.json");
    let twice = format!("{},{}", a.display(), a.display());
    let stderr = error_line(&nimble_bench(&["coverage", "--merge", &twice, "--results", again.to_str().unwrap(), "--out-dir", figures.to_str().unwrap()]));
    assert!(stderr.contains("model `resnet18` is in more than one record"), "{stderr}");
    assert!(!again.exists());
}

#[test]
fn bad_directories_records_and_names_get_one_line() {
    // Measuring a directory runs models (the `torch` feature); its arguments are checked first.
    if cfg!(feature = "torch") {
        let empty = scratch("empty-dir");
        std::fs::create_dir_all(&empty).unwrap();
        let stderr = error_line(&nimble_bench(&["coverage", empty.to_str().unwrap()]));
        assert!(stderr.contains("manifest.json") && stderr.contains("export_torchscript.py"), "{stderr}");

        let dir = scratch("manifest-dir");
        std::fs::create_dir_all(&dir).unwrap();
        let manifest = serde_json::json!({"torch": "2.11.0", "device": "cuda", "batch": 1, "models": [entry("resnet18")]});
        std::fs::write(dir.join("manifest.json"), manifest.to_string()).unwrap();
        let stderr = error_line(&nimble_bench(&["coverage", dir.to_str().unwrap(), "--only", "resnet18,zz"]));
        assert!(stderr.contains("`zz` is not in the manifest, which has resnet18"), "{stderr}");

        if !Path::new("/proc/driver/nvidia/version").exists() {
            let stderr = error_line(&nimble_bench(&["coverage", dir.to_str().unwrap()]));
            assert!(stderr.starts_with("error: coverage needs a CUDA device"), "{stderr}");
        }
    }

    let missing = scratch("no-such-record.json");
    let stderr = error_line(&nimble_bench(&["coverage", "--results", missing.to_str().unwrap()]));
    assert!(stderr.contains("no-such-record.json") && stderr.contains("nimble-bench coverage DIR"), "{stderr}");

    let not_coverage = scratch("not-coverage.json");
    std::fs::write(&not_coverage, r#"{"experiment": "inference", "rows": []}"#).unwrap();
    let stderr = error_line(&nimble_bench(&["coverage", "--results", not_coverage.to_str().unwrap()]));
    assert!(stderr.contains("not a coverage record"), "{stderr}");
}

#[test]
fn the_families_record_merges_from_its_committed_parts_with_its_published_numbers() {
    // docs/models.md and README: issue 41's 44 family models, 32 prepared and matched (MViT-v2-S
    // since 72a88ee, MViT-v1-B since a7d87d7), 12 refused as host syncs (the detectors, for NMS;
    // the Mask R-CNNs since 8b40095, whose export pastes masks on the GPU); no byte kept after
    // drop; prepare median 0.55 s, slowest DeepLabV3-ResNet101 2.31 s.
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results");
    let parts = ["5e5e9c1-tf1", "5e5e9c1-tf2", "5e5e9c1-tv1", "5e5e9c1-tv2", "e570ab3-tf3", "e570ab3-tv3", "e570ab3-tv4", "cca67aa-tv6", "72a88ee-mvit", "a7d87d7-mvit-v1", "8b40095-detection"]
        .map(|p| results.join(format!("coverage/coverage-families-{p}.json")).display().to_string())
        .join(",");
    let merged = scratch("families.json");
    let output = nimble_bench(&["coverage", "--merge", &parts, "--results", merged.to_str().unwrap(), "--out-dir", scratch("families-figures").to_str().unwrap()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let read = |path: &Path| -> CoverageRecord { serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap() };
    let (record, committed) = (read(&merged), read(&results.join("coverage/coverage-families.json")));
    assert_eq!(record.models, committed.models, "the committed merge is not that of its parts");
    let s = &record.summary;
    assert_eq!((s.population, s.ok), (44, 32));
    assert_eq!((s.statuses.get("host-sync"), s.statuses.len()), (Some(&12), 2), "{:?}", s.statuses);
    assert_eq!((s.memory_after_drop_measured, s.memory_kept_after_drop.len()), (32, 0));
    assert_eq!((format!("{:.2}", s.prepare_median_s), format!("{:.2}", s.prepare_max_s), s.prepare_max_model.as_str()), ("0.55".into(), "2.31".into(), "deeplabv3_resnet101"));
    let status = |name: &str| record.models.iter().find(|m| m.name == name).map(|m| (m.status, m.error.clone().unwrap_or_default())).unwrap();
    assert_eq!(status("wavlm").0, Status::Ok);
    assert_eq!(status("mvit_v2_s").0, Status::Ok);
    assert_eq!(status("mvit_v1_b").0, Status::Ok);
    let detectors: Vec<_> = record.models.iter().filter(|m| m.source.contains("family detection")).collect();
    assert_eq!(detectors.len(), 12);
    for m in &detectors {
        assert!(m.status == Status::HostSync && m.error.as_deref().is_some_and(|e| e.contains("non-maximum suppression")), "{}: {:?}", m.name, m.error);
    }
    // The 8b40095 part is the run's two Mask R-CNN rows; the run also exported and prepared
    // MViT-v1-B again (the exporter's count check by the tracer's record), already measured once.
    let full = read(&results.join("coverage/coverage-families-8b40095-detection-full.json"));
    let part = read(&results.join("coverage/coverage-families-8b40095-detection.json"));
    assert_eq!(serde_json::to_value(&part.parts).unwrap(), serde_json::to_value(&full.parts).unwrap());
    assert_eq!(part.models, full.models.iter().filter(|m| m.name.starts_with("maskrcnn")).cloned().collect::<Vec<_>>());
    assert_eq!(full.models.iter().map(|m| (m.name.as_str(), m.status)).collect::<Vec<_>>(), [("mvit_v1_b", Status::Ok), ("maskrcnn_resnet50_fpn", Status::HostSync), ("maskrcnn_resnet50_fpn_v2", Status::HostSync)]);
}
