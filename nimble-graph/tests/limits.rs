//! Input that must neither pass nor hang: out-of-range fields name their node, graphs and
//! synthetic specifications beyond what the analyses can hold are refused before they are
//! built, files are read with a bound, and the JSON reader survives arbitrary and mutated text.

use nimble_graph::{json::MAX_GRAPH_FILE_BYTES, Node, SyntheticSpec, TaskGraph, TaskGraphBuilder, MAX_NODES};
use proptest::prelude::*;

fn error(text: &str) -> String {
    TaskGraph::from_json_str(text).expect_err(text).to_string()
}

#[test]
fn durations_must_be_finite_non_negative_and_sane() {
    for (duration, shown) in [("-5", "-5"), ("1e308", "1e308,"), ("1e10", "1e10,")] {
        let message = error(&format!(r#"{{"nodes":[{{"id":0,"op":"a"}},{{"id":3,"op":"b","duration_us":{duration}}}]}}"#));
        assert!(message.starts_with(&format!("node 3: duration_us is {shown}")) && message.contains("expected a finite number"), "{message}");
    }
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.5] {
        let message = TaskGraphBuilder::new().add_node(Node::new(8, "a").with_duration(bad)).unwrap_err().to_string();
        assert!(message.starts_with("node 8: duration_us is"), "{bad}: {message}");
    }
    for good in ["0", "0.5", "1e9"] {
        TaskGraph::from_json_str(&format!(r#"{{"nodes":[{{"id":0,"op":"a","duration_us":{good}}}]}}"#)).expect(good);
    }
}

#[test]
fn sm_share_must_be_in_zero_one() {
    for bad in ["0", "1.5", "-1", "\"half\"", "null"] {
        let message = error(&format!(r#"{{"nodes":[{{"id":2,"op":"a","attrs":{{"sm_share":{bad}}}}}]}}"#));
        assert!(message.starts_with(&format!("node 2: sm_share is {bad}, expected a number in (0, 1]")), "{message}");
    }
    TaskGraph::from_json_str(r#"{"nodes":[{"id":2,"op":"a","attrs":{"sm_share":1}},{"id":3,"op":"a","attrs":{"sm_share":0.25}}]}"#).unwrap();
}

#[test]
fn graphs_beyond_the_node_limit_are_refused_as_they_grow() {
    let mut builder = TaskGraphBuilder::new();
    for id in 0..MAX_NODES as u64 {
        builder.add_node(Node::new(id, "a")).unwrap();
    }
    let message = builder.add_node(Node::new(MAX_NODES as u64, "a")).unwrap_err().to_string();
    assert!(message.contains("more than 100000 nodes") && message.contains("1.25 GB"), "{message}");
}

#[test]
fn synthetic_specs_beyond_the_limit_are_refused_before_generating() {
    let started = std::time::Instant::now();
    for (spec, nodes) in [("fan:1000000:1000", "1,000,000,002"), ("chain:100001", "100,001"), ("dnn:18446744073709551615", "18,446,744,073,709,551,615")] {
        let message = spec.parse::<SyntheticSpec>().unwrap_err().to_string();
        assert!(message.contains(&format!("it has {nodes} nodes, more than 100000")), "{spec}: {message}");
    }
    // A NASNet-like graph's size is a bound until it is drawn: the message says so, and where
    // the bound stops (nasnet:2499 builds about 75,000 nodes; 2500 cells may pass the limit).
    for spec in ["nasnet:1000000", "nasnet:2500"] {
        let message = spec.parse::<SyntheticSpec>().unwrap_err().to_string();
        assert!(message.contains("it may have up to") && message.contains("at most 2499 cells fit"), "{spec}: {message}");
    }
    assert!("nasnet:2499".parse::<SyntheticSpec>().is_ok());
    assert!(started.elapsed().as_secs_f64() < 1.0, "refusing allocated: {:?}", started.elapsed());
    // At the limit, fine.
    assert_eq!("layered:100000".parse::<SyntheticSpec>().unwrap().max_nodes(), 100_000);
}

#[cfg(target_os = "linux")]
#[test]
fn files_are_read_with_a_bound() {
    let message = TaskGraph::read_json("/dev/zero").unwrap_err().to_string();
    assert_eq!(message, format!("/dev/zero: larger than {} MiB, the most an input file may be (a task graph of the maximum size is far smaller)", MAX_GRAPH_FILE_BYTES >> 20));
    let path = std::env::temp_dir().join(format!("nimble-graph-binary-{}.json", std::process::id()));
    std::fs::write(&path, [b'{', 0xff, 0xfe, b'}']).unwrap();
    let message = TaskGraph::read_json(&path).unwrap_err().to_string();
    std::fs::remove_file(&path).unwrap();
    assert!(message.contains("not UTF-8 text (byte 1 is not valid UTF-8); expected JSON"), "{message}");
}

/// Gzip-compressed graphs (how the coverage set's graphs are committed) read like plain ones;
/// the bound holds for the decompressed text, and a file that is not gzip says what was expected.
#[test]
fn gzip_graphs_are_read_with_the_same_bound() {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("nimble-graph-gz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gzip = |bytes: &[u8]| {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    };
    let graph = "dnn:300".parse::<SyntheticSpec>().unwrap().generate();
    let path = dir.join("dnn.graph.json.gz");
    std::fs::write(&path, gzip(graph.to_json_string().as_bytes())).unwrap();
    assert_eq!(TaskGraph::read_json(&path).unwrap().to_json_string(), graph.to_json_string());

    // 65 MiB of spaces in a file of about 65 KiB: refused at the bound, not held.
    let bomb = dir.join("bomb.graph.json.gz");
    std::fs::write(&bomb, gzip(&vec![b' '; (MAX_GRAPH_FILE_BYTES + (1 << 20)) as usize])).unwrap();
    let message = TaskGraph::read_json(&bomb).unwrap_err().to_string();
    assert!(message.contains(&format!("larger than {} MiB", MAX_GRAPH_FILE_BYTES >> 20)), "{message}");

    let plain = dir.join("plain.graph.json.gz");
    std::fs::write(&plain, graph.to_json_string()).unwrap();
    let message = TaskGraph::read_json(&plain).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(message.contains("expected a gzip-compressed JSON file"), "{message}");
}

/// A valid graph's JSON to mutate.
fn seed_json() -> String {
    "nasnet:2".parse::<SyntheticSpec>().unwrap().generate().to_json_string()
}

proptest! {
    // Bounded: a few thousand inputs, about a second in CI.
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_is_an_error_or_a_valid_graph_never_a_panic(text in "\\PC{0,200}") {
        if let Ok(graph) = TaskGraph::from_json_str(&text) {
            prop_assert!(graph.len() <= MAX_NODES);
        }
    }

    #[test]
    fn mutated_graphs_are_an_error_or_a_valid_graph_never_a_panic(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), prop::sample::select(vec!["", "-", "9", "1e309", "-1", "\"", "{", "}", "[", "]", ",", ":", "null", "0.0", "NaN", "\u{0}", "\"sm_share\":2", "\"duration_us\":-3"])), 1..6),
        truncate in any::<prop::sample::Index>(),
        cut in any::<bool>(),
    ) {
        let mut text = seed_json();
        for (at, insert) in edits {
            let mut position = at.index(text.len() + 1);
            while !text.is_char_boundary(position) {
                position -= 1;
            }
            text.insert_str(position, insert);
        }
        if cut {
            let mut end = truncate.index(text.len() + 1);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        match TaskGraph::from_json_str(&text) {
            Ok(graph) => {
                for node in graph.nodes() {
                    if let Some(d) = node.duration_us {
                        prop_assert!(d.is_finite() && d >= 0.0);
                    }
                }
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }
}
