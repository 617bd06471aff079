//! The half-precision records as docs/python.md publishes them ("Half precision over the
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
    let mut cells: BTreeMap<(String, String, String), f64> = BTreeMap::new();
    let mut skipped = Vec::new();
    for part in parts {
        let r = record(&format!("half-precision-53f9b5d-{part}.json"));
        assert!(
            r["provenance"]["commit"]
                .as_str()
                .unwrap()
                .starts_with("53f9b5d"),
            "{part}"
        );
        for row in rows(&r) {
            let key = (
                row["model"].as_str().unwrap().to_string(),
                row["dtype"].as_str().unwrap().to_string(),
                row["system"].as_str().unwrap().to_string(),
            );
            let error = row["relative_error"]
                .as_f64()
                .unwrap_or_else(|| panic!("{key:?} failed: {}", row["error"]));
            cells.insert(key, error);
        }
        skipped.extend(r["skipped"].as_array().unwrap().iter().map(|s| {
            (
                s["model"].as_str().unwrap().to_string(),
                s["reason"].as_str().unwrap().to_string(),
            )
        }));
    }
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
    let r = record("same-process-72a88ee-bfloat16-b1-bn-cnns-folded-in-float32.json");
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
    // docs/python.md, "Half precision in nimble_rs.Nimble" (e570ab3, BatchNorm no longer folded
    // into half-precision weights): relative max-abs distance from eager, Nimble / reduce-overhead.
    let published = [
        ("same-process-e570ab3-bfloat16-b1-bn-cnns.json", "googlenet", "0", "0.016"),
        ("same-process-e570ab3-bfloat16-b1-bn-cnns.json", "inception-v3", "0.099", "0.111"),
        ("same-process-e570ab3-bfloat16-b1-bn-cnns.json", "resnet50", "0.018", "0.084"),
        ("same-process-e570ab3-bfloat16-b1-bn-cnns.json", "mobilenet-v2", "0", "0.049"),
        ("same-process-e570ab3-float16-b1-resnet50-googlenet.json", "resnet50", "0.0083", "0.012"),
        ("same-process-e570ab3-float16-b1-resnet50-googlenet.json", "googlenet", "0", "0.0057"),
    ];
    for (file, model, nimble, compile) in published {
        let r = record(file);
        let error = |system: &str| rows(&r).iter().find(|row| row["model"] == model && row["system"] == system).unwrap()["relative_error"].as_f64().unwrap();
        let (n, c) = (error("nimble"), error("compile"));
        assert!(n <= c, "{model} in {file}: Nimble {n} further than the compiler {c}");
        assert!(rounds_to(n, nimble) && rounds_to(c, compile), "{model} in {file}: {n} / {c}, published {nimble} / {compile}");
    }
}
