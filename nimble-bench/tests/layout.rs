//! The code's layout keeps its promises: within every crate of the workspace, no file imports a
//! module that imports it back, directly or around a longer circle (ARCHITECTURE.md). A module
//! is a top-level file (`src/x.rs`) or directory (`src/x/`); it depends on `y` when its text
//! names `crate::y`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// Each top-level module of the crate at `src` and the modules it names through `crate::`.
fn dependencies(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).unwrap();
        let module = relative.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let entry = graph.entry(module.clone()).or_default();
        for (at, _) in text.match_indices("crate::") {
            // Not `nimble_crate::` or the like: the word starts here.
            if at > 0 && (text.as_bytes()[at - 1].is_ascii_alphanumeric() || text.as_bytes()[at - 1] == b'_') {
                continue;
            }
            let name: String = text[at + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && name != module {
                entry.insert(name);
            }
        }
    }
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for targets in graph.values_mut() {
        targets.retain(|t| modules.contains(t));
    }
    graph
}

/// A circle of modules, if the dependencies have one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(node: &str, graph: &BTreeMap<String, BTreeSet<String>>, state: &mut BTreeMap<String, u8>, stack: &mut Vec<String>) -> Option<Vec<String>> {
        state.insert(node.to_string(), 1);
        stack.push(node.to_string());
        for next in &graph[node] {
            match state.get(next).copied().unwrap_or(0) {
                1 => {
                    let from = stack.iter().position(|n| n == next).unwrap();
                    let mut found = stack[from..].to_vec();
                    found.push(next.clone());
                    return Some(found);
                }
                0 => {
                    if let Some(found) = visit(next, graph, state, stack) {
                        return Some(found);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(node.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for node in graph.keys() {
        if state.get(node).copied().unwrap_or(0) == 0 {
            if let Some(found) = visit(node, graph, &mut state, &mut Vec::new()) {
                return Some(found);
            }
        }
    }
    None
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let crates = ["nimble-graph", "nimble-sched", "nimble-cuda", "nimble-torch", "experiments", "nimble-bench", "nimble-py", "nimble-py/engine"];
    let mut circles = Vec::new();
    for name in crates {
        let graph = dependencies(&root.join(name).join("src"));
        assert!(!graph.is_empty(), "{name}: no modules found");
        if let Some(found) = circle(&graph) {
            circles.push(format!("{name}: {}", found.join(" -> ")));
        }
    }
    assert!(circles.is_empty(), "import circles:\n{}", circles.join("\n"));
}

#[test]
fn the_check_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec![])].into_iter().map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect())).collect();
    assert_eq!(circle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn slug(heading: &str) -> String {
    heading.trim().to_lowercase().chars().filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_')).map(|c| if c == ' ' { '-' } else { c }).collect()
}

/// The lines of a Markdown page outside fenced code, with their 0-based numbers.
fn unfenced(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The headings' anchors and the relative links (target, line) of a markdown file, outside code.
fn anchors_and_links(text: &str) -> (BTreeSet<String>, Vec<(String, usize)>) {
    let (mut anchors, mut links) = (BTreeSet::new(), Vec::new());
    for (number, line) in unfenced(text) {
        if let Some(heading) = line.strip_prefix('#') {
            anchors.insert(slug(heading.trim_start_matches('#')));
        }
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = &after[..end];
            if !target.starts_with("http") && !target.starts_with("mailto:") && !target.contains(' ') {
                links.push((target.to_string(), number + 1));
            }
            rest = &after[end..];
        }
    }
    (anchors, links)
}

/// Every relative link of README.md, ARCHITECTURE.md and docs/ resolves: the file exists and,
/// where the link names a heading, the heading does.
#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        pages.push(entry.unwrap().path());
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        let (own, links) = anchors_and_links(&text);
        for (target, line) in links {
            checked += 1;
            let (path, anchor) = target.split_once('#').map_or((target.as_str(), None), |(p, a)| (p, Some(a)));
            let file = if path.is_empty() { page.clone() } else { page.parent().unwrap().join(path) };
            if !file.exists() {
                broken.push(format!("{}:{line}: {target}: no such file", page.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                let anchors = if path.is_empty() { own.clone() } else { anchors_and_links(&std::fs::read_to_string(&file).unwrap_or_default()).0 };
                if !anchors.contains(anchor) {
                    broken.push(format!("{}:{line}: {target}: no such heading", page.display()));
                }
            }
        }
    }
    assert!(checked > 40, "only {checked} links found");
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_link_check_knows_githubs_anchors() {
    assert_eq!(slug(" `torch.compile(model, backend=\"nimble\")`: the compiler's fused kernels"), "torchcompilemodel-backendnimble-the-compilers-fused-kernels");
    let (anchors, links) = anchors_and_links("# A title\n```\n[x](not-a-link.md)\n```\nsee [b](b.md#a-title) and [w](https://x.org)\n");
    assert!(anchors.contains("a-title"));
    assert_eq!(links, vec![("b.md#a-title".to_string(), 5)]);
}

/// The sections of a Markdown page (split at its headings, fenced code left out) that state a
/// measurement (a number in ms, µs or ×) without a link into `paper-figs/results/`: each
/// section's first line.
fn unlinked_measurements(text: &str) -> Vec<String> {
    let mut sections: Vec<Vec<&str>> = vec![Vec::new()];
    for (_, line) in unfenced(text) {
        if line.starts_with('#') {
            sections.push(Vec::new());
        }
        sections.last_mut().unwrap().push(line);
    }
    let measured = |text: &str| {
        ["ms", "µs", "×"].iter().any(|unit| {
            text.match_indices(unit).any(|(at, _)| {
                let before = text[..at].trim_end_matches(' ');
                let after = text[at + unit.len()..].chars().next();
                before.ends_with(|c: char| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_alphanumeric())
            })
        })
    };
    sections
        .into_iter()
        .filter(|lines| {
            let section = lines.join("\n");
            measured(&section) && !section.split("](").skip(1).any(|target| target.split(')').next().unwrap_or("").contains("paper-figs/results/"))
        })
        .map(|lines| lines.first().copied().unwrap_or("").to_string())
        .collect()
}

/// Every number the README and docs/ state as measured comes with a link to its committed
/// record: each section (between headings) that gives a time or a speedup links into
/// paper-figs/results/, where the record holds the machine, the date and the commit.
#[test]
fn every_measured_number_in_the_docs_links_its_record() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![root.join("README.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        pages.push(entry.unwrap().path());
    }
    // Sections whose numbers are not measurements: the schema's limits.
    let exempt = [("cli.md", "### The task-graph JSON schema")];
    let mut missing = Vec::new();
    for page in &pages {
        let name = page.file_name().unwrap().to_string_lossy().to_string();
        for heading in unlinked_measurements(&std::fs::read_to_string(page).unwrap()) {
            if !exempt.iter().any(|(file, title)| *file == name && heading == *title) {
                missing.push(format!("{name}: {heading}"));
            }
        }
    }
    assert!(missing.is_empty(), "sections stating measured numbers without a link into paper-figs/results/:\n{}", missing.join("\n"));
}

#[test]
fn the_record_check_finds_an_unlinked_measurement() {
    let page = "# A\nran 1.5 ms ([record](../paper-figs/results/x.json))\n## B\n1.2× faster\n## C\nin 2 seconds, 3 msgs\n```\n4 ms\n```\n";
    assert_eq!(unlinked_measurements(page), vec!["## B".to_string()]);
}

/// A line's or cell's length as it is read: a link target too long to share a line with
/// anything (over 100 characters, a record's path) counts as nothing, since it cannot be wrapped.
fn readable_length(text: &str) -> usize {
    let mut length = 0;
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        length += rest[..at + 2].chars().count();
        let (target, after) = rest[at + 2..].split_once(')').unwrap_or((&rest[at + 2..], ""));
        if target.chars().count() <= 100 {
            length += target.chars().count();
        }
        length += 1;
        rest = after;
    }
    length + rest.chars().count()
}

/// What makes a page hard to read at its front door: prose lines or table cells over 120
/// characters (fenced code left out), and commit hashes outside a link's target (a record's
/// link may name its commit; prose says what is true now, the log says when it changed).
fn front_door_problems(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (number, line) in unfenced(text) {
        let row = line.trim_start();
        let cells: Vec<&str> = if row.starts_with('|') { row.trim_matches('|').split('|').collect() } else { vec![line] };
        if let Some(cell) = cells.iter().find(|c| readable_length(c.trim()) > 120) {
            problems.push(format!("line {}: {} characters in `{}…`", number + 1, readable_length(cell.trim()), cell.trim().chars().take(40).collect::<String>()));
        }
        // Link targets out, then any 7–40 hex token with a digit and a letter is a commit.
        let mut prose = String::new();
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            prose.push_str(&rest[..at]);
            rest = rest[at + 2..].split_once(')').map_or("", |(_, after)| after);
        }
        prose.push_str(rest);
        for token in prose.split(|c: char| !c.is_ascii_alphanumeric()) {
            let hex = (7..=40).contains(&token.len()) && token.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase());
            if hex && token.chars().any(|c| c.is_ascii_digit()) && token.chars().any(|c| c.is_ascii_alphabetic()) {
                problems.push(format!("line {}: commit `{token}` outside a record link", number + 1));
            }
        }
    }
    problems
}

/// README.md is a front door: no prose line or table cell over 120 characters, no commit hash
/// outside a link to a record (issue 84; the other pages follow as they are split by reader).
#[test]
fn the_readme_reads_as_a_front_door() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let problems = front_door_problems(&std::fs::read_to_string(root.join("README.md")).unwrap());
    assert!(problems.is_empty(), "README.md:\n{}", problems.join("\n"));
}

/// Every page of the book (docs/, but for the dated log, which keeps each run as it was told) and
/// ARCHITECTURE.md reads at 120 characters: no prose line or table cell longer.
#[test]
fn every_page_but_the_log_keeps_to_120_characters() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut pages = vec![root.join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") && path.file_name().is_some_and(|n| n != "log.md") {
            pages.push(path);
        }
    }
    let mut long = Vec::new();
    for page in &pages {
        let name = page.file_name().unwrap().to_string_lossy().to_string();
        for problem in front_door_problems(&std::fs::read_to_string(page).unwrap()) {
            if !problem.contains("commit `") {
                long.push(format!("{name}: {problem}"));
            }
        }
    }
    assert!(long.is_empty(), "lines or table cells over 120 characters:\n{}", long.join("\n"));
}

#[test]
fn the_front_door_check_finds_long_cells_and_bare_commits() {
    let long = "x".repeat(121);
    let page = format!("ok line\n| a | {long} |\nsince `a2882ec` it is on ([record](r-a2882ec.json))\n```\n{long} 0123abc\n```\n");
    let problems = front_door_problems(&page);
    assert_eq!(problems.len(), 2, "{problems:?}");
    // A record's path too long to wrap is not counted; the words around it are.
    let path = format!("../paper-figs/results/{}.json", "r".repeat(100));
    assert!(front_door_problems(&format!("| [record]({path}) |\n")).is_empty());
    assert_eq!(front_door_problems(&format!("{} [record]({path})\n", "w".repeat(120))).len(), 1);
    assert!(problems[0].starts_with("line 2: 121 characters") && problems[1] == "line 3: commit `a2882ec` outside a record link", "{problems:?}");
}
