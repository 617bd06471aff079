//! The half-precision records as docs/log.md publishes them ("Half precision over the
//! families" and "Half precision in nimble_rs.Nimble"): Nimble's distance from eager against
//! torch.compile's, model by model.

use std::collections::BTreeMap;

use serde_json::Value;

fn record(file: &str) -> Value {
    let path = format!(
        "{}/../paper-figs/results/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")))
        .unwrap()
}

fn rows(record: &Value) -> &Vec<Value> {
    record["rows"].as_array().unwrap()
}

/// A published number rounds the measured one: within half a unit of its last digit ("0":
/// exactly).
fn rounds_to(x: f64, published: &str) -> bool {
    if published == "0" {
        return x == 0.0;
    }
    let decimals = published.split('.').nth(1).map_or(0, str::len) as i32;
    (x - published.parse::<f64>().unwrap()).abs() <= 0.5 * 10f64.powi(-decimals) + 1e-12
}

/// Each (record, model, Nimble's published distance, the compiler's): Nimble's at most the
/// compiler's, both as published.
fn assert_at_most_the_compilers(published: &[(&str, &str, &str, &str)]) {
    for &(file, model, nimble, compile) in published {
        let r = record(file);
        let (n, c) = (distance(&r, model, "nimble"), distance(&r, model, "compile"));
        assert!(n <= c, "{model} in {file}: Nimble {n} further than the compiler {c}");
        assert!(rounds_to(n, nimble) && rounds_to(c, compile), "{model} in {file}: {n} / {c}, published {nimble} / {compile}");
    }
}

/// A same-process record's relative max-abs distance from eager for `model` through `system`.
fn distance(record: &Value, model: &str, system: &str) -> f64 {
    rows(record).iter().find(|row| row["model"] == model && row["system"] == system).unwrap()["relative_error"].as_f64().unwrap()
}

#[test]
fn over_the_families_nimble_is_at_most_the_compilers_distance_in_55_of_58_cells_as_published() {
    // 53f9b5d on the H200: the families' static models in bfloat16 and float16; T5 and SigLIP
    // measured again on 11 inputs (their later records replace the 3-input ones).
    let parts = [
        "tv1",
        "tv2",
        "tv3",
        "tf1",
        "tf2",
        "tf3",
        "tf4",
        "tf5",
        "t5-11-checks",
        "siglip-11-checks",
    ];
    let files: Vec<String> = parts.iter().map(|part| format!("half-precision/half-precision-53f9b5d-{part}.json")).collect();
    let cells = cells_of(&files.iter().map(String::as_str).collect::<Vec<_>>(), "53f9b5d");
    let mut skipped: Vec<(String, String)> = files
        .iter()
        .flat_map(|file| {
            record(file)["skipped"].as_array().unwrap().iter().map(|s| (s["model"].as_str().unwrap().to_string(), s["reason"].as_str().unwrap().to_string())).collect::<Vec<_>>()
        })
        .collect();
    let mut further = Vec::new();
    let mut compared = 0;
    for ((model, dtype, system), nimble) in &cells {
        if system != "nimble" {
            continue;
        }
        let compile = cells[&(model.clone(), dtype.clone(), "compile".to_string())];
        compared += 1;
        if *nimble > compile {
            // Where Nimble is further, it is by at most 1.2 times (about a unit of the last place).
            assert!(
                *nimble <= 1.2 * compile,
                "{model} {dtype}: Nimble {nimble} against the compiler's {compile}"
            );
            further.push(format!("{model} {dtype}"));
        }
    }
    assert_eq!(compared, 58);
    assert_eq!(
        further,
        [
            "siglip-vision bfloat16",
            "siglip-vision float16",
            "t5 bfloat16"
        ]
    );
    // RAFT does not run in half precision at all: eager itself fails.
    skipped.sort();
    assert_eq!(
        skipped.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(),
        ["raft_large", "raft_small"]
    );
    assert!(
        skipped
            .iter()
            .all(|(_, reason)| reason.contains("expected scalar type BFloat16 but found Float")),
        "{skipped:?}"
    );
    // The numbers the text names: MViT-v2-S, where the compiler drifts 0.41 and Nimble runs
    // eager's kernels, and the three cells where Nimble is further.
    let published = [
        ("mvit_v2_s", "bfloat16", "0", "0.41"),
        ("t5", "bfloat16", "0.0143", "0.0125"),
        ("siglip-vision", "bfloat16", "0.0175", "0.0161"),
        ("siglip-vision", "float16", "0.00215", "0.00184"),
    ];
    for (model, dtype, nimble, compile) in published {
        let at = |system: &str| cells[&(model.to_string(), dtype.to_string(), system.to_string())];
        assert!(
            rounds_to(at("nimble"), nimble) && rounds_to(at("compile"), compile),
            "{model} {dtype}: {} / {}",
            at("nimble"),
            at("compile")
        );
    }
}

#[test]
fn folded_in_float32_the_batchnorm_cnns_are_faster_and_further_from_eager_than_the_compiler() {
    // 72a88ee (BatchNorm folded into half-precision weights in float32, now
    // `fold_half_precision`): distance and latency ms, Nimble / reduce-overhead, bfloat16.
    let r = record("same-process/same-process-72a88ee-bfloat16-b1-bn-cnns-folded-in-float32.json");
    let published = [
        ("resnet50", "0.127", "0.084", "0.392", "0.625"),
        ("mobilenet-v2", "0.116", "0.050", "0.415", "0.505"),
        ("googlenet", "0.134", "0.021", "0.388", "0.611"),
        ("inception-v3", "0.189", "0.085", "0.545", "1.133"),
    ];
    for (model, nimble_error, compile_error, nimble_ms, compile_ms) in published {
        let row = |system: &str| {
            rows(&r)
                .iter()
                .find(|row| row["model"] == model && row["system"] == system)
                .unwrap()
        };
        let (n, c) = (row("nimble"), row("compile"));
        let error = |row: &Value| row["relative_error"].as_f64().unwrap();
        let ms = |row: &Value| row["latency"]["median_us"].as_f64().unwrap() / 1000.0;
        assert!(error(n) > error(c) && ms(n) < ms(c), "{model}");
        assert!(
            rounds_to(error(n), nimble_error)
                && rounds_to(error(c), compile_error)
                && rounds_to(ms(n), nimble_ms)
                && rounds_to(ms(c), compile_ms),
            "{model}: {} / {} in {} / {} ms",
            error(n),
            error(c),
            ms(n),
            ms(c)
        );
    }
}

#[test]
fn half_precision_records_hold_nimble_at_most_the_compilers_distance_as_published() {
    // docs/log.md, "Half precision in nimble_rs.Nimble" (e570ab3, BatchNorm no longer folded
    // into half-precision weights): relative max-abs distance from eager, Nimble / reduce-overhead.
    let published = [
        ("same-process/same-process-e570ab3-bfloat16-b1-bn-cnns.json", "googlenet", "0", "0.016"),
        ("same-process/same-process-e570ab3-bfloat16-b1-bn-cnns.json", "inception-v3", "0.099", "0.111"),
        ("same-process/same-process-e570ab3-bfloat16-b1-bn-cnns.json", "resnet50", "0.018", "0.084"),
        ("same-process/same-process-e570ab3-bfloat16-b1-bn-cnns.json", "mobilenet-v2", "0", "0.049"),
        ("same-process/same-process-e570ab3-float16-b1-resnet50-googlenet.json", "resnet50", "0.0083", "0.012"),
        ("same-process/same-process-e570ab3-float16-b1-resnet50-googlenet.json", "googlenet", "0", "0.0057"),
    ];
    assert_at_most_the_compilers(&published);
}

/// (model, dtype, system) -> relative max-abs distance from eager, over the records named.
fn cells_of(files: &[&str], commit: &str) -> BTreeMap<(String, String, String), f64> {
    let mut cells = BTreeMap::new();
    for file in files {
        let r = record(file);
        assert!(r["provenance"]["commit"].as_str().unwrap().starts_with(commit), "{file}");
        for row in rows(&r) {
            let key = (row["model"].as_str().unwrap().to_string(), row["dtype"].as_str().unwrap().to_string(), row["system"].as_str().unwrap().to_string());
            cells.insert(key.clone(), row["relative_error"].as_f64().unwrap_or_else(|| panic!("{file} {key:?} failed: {}", row["error"])));
        }
    }
    cells
}

#[test]
fn after_the_layout_and_mask_fixes_every_transformer_of_the_families_is_exactly_eagers() {
    // docs/log.md, "Where the last drifts came from": at 3669183 (SigLIP at 244ed52, whose
    // string-padded convolution the first fix missed), 11 inputs each, H100.
    let mut cells = cells_of(&["half-precision/half-precision-3669183-tf1.json", "half-precision/half-precision-3669183-tf2.json", "half-precision/half-precision-3669183-tf3.json", "half-precision/half-precision-3669183-tf4.json", "half-precision/half-precision-3669183-tf5.json"], "3669183");
    assert!(cells[&("siglip-vision".into(), "bfloat16".into(), "nimble".into())] > 0.0, "3669183 still drifted on SigLIP");
    cells.extend(cells_of(&["half-precision/half-precision-244ed52-siglip-11-checks.json"], "244ed52"));
    let nimble: Vec<_> = cells.iter().filter(|((_, _, system), _)| system == "nimble").collect();
    assert_eq!(nimble.len(), 30, "15 transformers in two dtypes");
    for ((model, dtype, _), distance) in nimble {
        let compile = cells[&(model.clone(), dtype.clone(), "compile".to_string())];
        assert!(*distance == 0.0 && compile > 0.0, "{model} {dtype}: Nimble {distance}, compile {compile}");
    }
    // The compiler's, as published: 0.0125–0.023 in bfloat16, 0.0016–0.0028 in float16.
    for (dtype, low, high) in [("bfloat16", 0.0125, 0.023), ("float16", 0.0016, 0.0028)] {
        let compile: Vec<f64> = cells.iter().filter(|((_, d, s), _)| d == dtype && s == "compile").map(|(_, e)| *e).collect();
        assert!(compile.iter().all(|e| (low - 5e-4..high + 5e-4).contains(e)), "{dtype}: {compile:?}");
    }
    // The stages one at a time at 53f9b5d: NCHW forced made the vision towers eager's; T5 was
    // eager's only without the rewrites, and merged linears changed nothing.
    let diagnosis = cells_of(&["half-precision/half-precision-53f9b5d-diagnosis-siglip-t5.json", "half-precision/half-precision-53f9b5d-diagnosis-clip-dinov2.json"], "53f9b5d");
    let at = |model: &str, dtype: &str, system: &str| diagnosis[&(model.to_string(), dtype.to_string(), system.to_string())];
    for model in ["siglip-vision", "clip-vision", "dinov2"] {
        for dtype in ["bfloat16", "float16"] {
            assert!(at(model, dtype, "nimble-nchw") == 0.0 && at(model, dtype, "nimble-no-rewrites") == 0.0, "{model} {dtype}");
        }
    }
    assert!(at("siglip-vision", "bfloat16", "nimble") > 0.0 && at("dinov2", "bfloat16", "nimble") > 0.0);
    for dtype in ["bfloat16", "float16"] {
        assert!(at("t5", dtype, "nimble-nchw") > 0.0 && at("t5", dtype, "nimble-no-rewrites") == 0.0, "t5 {dtype}");
        assert_eq!(at("t5", dtype, "torchscript-frozen"), at("t5", dtype, "torchscript-frozen-concat"), "t5 {dtype}");
    }
    assert!(rounds_to(at("t5", "float16", "nimble-rewritten-op-by-op"), "0.0016"));
}

#[test]
fn on_the_same_process_models_in_half_precision_nimble_is_at_most_the_compilers_distance_as_published() {
    // docs/log.md, "Half precision on the same-process models": the cells measured at
    // 53f9b5d and 244ed52 (the e570ab3 ones are guarded above). Nimble / reduce-overhead.
    let published = [
        ("same-process/same-process-244ed52-bfloat16-b1-resnet101-efficientnet-b0-efficientnet-b5.json", "resnet101", "0.093", "0.184"),
        ("same-process/same-process-244ed52-bfloat16-b1-resnet101-efficientnet-b0-efficientnet-b5.json", "efficientnet-b0", "0", "0.046"),
        ("same-process/same-process-244ed52-bfloat16-b1-resnet101-efficientnet-b0-efficientnet-b5.json", "efficientnet-b5", "0.0062", "0.0093"),
        ("same-process/same-process-244ed52-bfloat16-b1-inception-v4-nasnet-a-large.json", "inception-v4", "0.271", "0.278"),
        ("same-process/same-process-244ed52-bfloat16-b1-inception-v4-nasnet-a-large.json", "nasnet-a-large", "0.111", "0.155"),
        ("same-process/same-process-244ed52-bfloat16-b1-inception-v4-11-checks.json", "inception-v4", "0.2555", "0.2555"),
        ("same-process/same-process-244ed52-float16-b1-inception-v4-nasnet-a-large.json", "nasnet-a-large", "0.038", "0.042"),
        ("same-process/same-process-244ed52-float16-b1-inception-v4-11-checks.json", "inception-v4", "0.200", "0.205"),
        ("same-process/same-process-244ed52-float16-b1-efficientnet-b0-efficientnet-b5-bert-base.json", "efficientnet-b0", "0", "0.0043"),
        ("same-process/same-process-244ed52-float16-b1-efficientnet-b0-efficientnet-b5-bert-base.json", "efficientnet-b5", "0.00078", "0.0012"),
        ("same-process/same-process-244ed52-float16-b1-efficientnet-b0-efficientnet-b5-bert-base.json", "bert-base", "0", "0.0026"),
        ("same-process/same-process-53f9b5d-float16-b1-inception-v3-mobilenet-v2-resnet101.json", "inception-v3", "0.019", "0.021"),
        ("same-process/same-process-53f9b5d-float16-b1-inception-v3-mobilenet-v2-resnet101.json", "mobilenet-v2", "0", "0.0073"),
        ("same-process/same-process-53f9b5d-float16-b1-inception-v3-mobilenet-v2-resnet101.json", "resnet101", "0.040", "0.059"),
    ];
    assert_at_most_the_compilers(&published);
    // The close cell, as published: Inception-v4 in float16 over 5 inputs, 1.03 times.
    let r = record("same-process/same-process-244ed52-float16-b1-inception-v4-nasnet-a-large.json");
    let (n, c) = (distance(&r, "inception-v4", "nimble"), distance(&r, "inception-v4", "compile"));
    assert!(rounds_to(n, "0.220") && rounds_to(c, "0.213"), "{n} / {c}");
}

#[test]
fn at_8b40095_the_torchvision_families_and_mvit_v1_b_are_at_most_the_compilers_distance_as_published() {
    // docs/log.md, "The torchvision families again, and MViT-v1-B" (H100): 28 cells, Nimble
    // at most the compiler's distance in all and exactly eager's in 20.
    let cells = cells_of(&["half-precision/half-precision-8b40095-tv1.json", "half-precision/half-precision-8b40095-tv2.json", "half-precision/half-precision-8b40095-tv3.json", "half-precision/half-precision-8b40095-tv4.json", "half-precision/half-precision-8b40095-mvit-v1.json"], "8b40095");
    let nimble: Vec<_> = cells.iter().filter(|((_, _, system), _)| system == "nimble").collect();
    assert_eq!(nimble.len(), 28);
    for ((model, dtype, _), distance) in &nimble {
        let compile = cells[&(model.clone(), dtype.clone(), "compile".to_string())];
        assert!(**distance <= compile, "{model} {dtype}: Nimble {distance}, compile {compile}");
    }
    assert_eq!(nimble.iter().filter(|(_, d)| **d == 0.0).count(), 20);
    let at = |model: &str, dtype: &str, system: &str| cells[&(model.to_string(), dtype.to_string(), system.to_string())];
    let published = [
        ("fcn_resnet50", "bfloat16", "0.22", "0.53"),
        ("fcn_resnet50", "float16", "0.036", "0.094"),
        ("deeplabv3_resnet50", "bfloat16", "0.25", "0.61"),
        ("deeplabv3_resnet50", "float16", "0.036", "0.13"),
        ("fcn_resnet101", "bfloat16", "0.59", "0.81"),
        ("fcn_resnet101", "float16", "0.11", "0.36"),
        ("deeplabv3_resnet101", "bfloat16", "0.61", "1.10"),
        ("deeplabv3_resnet101", "float16", "0.145", "0.42"),
        ("mvit_v2_s", "bfloat16", "0", "0.42"),
        ("mvit_v1_b", "bfloat16", "0", "0.0098"),
        ("mvit_v1_b", "float16", "0", "0.0012"),
    ];
    for (model, dtype, nimble, compile) in published {
        assert!(rounds_to(at(model, dtype, "nimble"), nimble) && rounds_to(at(model, dtype, "compile"), compile), "{model} {dtype}: {} / {}", at(model, dtype, "nimble"), at(model, dtype, "compile"));
    }
    // Swin3D-B was cut by the call's limit: not in the record (its bfloat16 cells are in the log).
    assert!(!cells.keys().any(|(model, _, _)| model == "swin3d_b"));
    // BERT-base in bfloat16 after the mask change, 11 inputs: eager's numbers, the compiler 0.023.
    let bert = record("same-process/same-process-8b40095-bfloat16-b1-bert-base.json");
    assert_eq!(rows(&bert).iter().find(|r| r["system"] == "nimble").unwrap()["relative_errors"].as_array().unwrap().len(), 11);
    assert_at_most_the_compilers(&[("same-process/same-process-8b40095-bfloat16-b1-bert-base.json", "bert-base", "0", "0.023")]);
}
