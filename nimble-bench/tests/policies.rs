//! A researcher's new policy, registered: the committed figures stay as they are, and a policy
//! whose plan fails the checker is one failed row, the rest of the table printed and the status
//! non-zero. Needs the test build's throwaway policies (the README's test command builds them:
//! `--features nimble-sched/test-policies`); without them each test says so and passes.
#![cfg(not(feature = "torch"))]

mod common;

use common::nimble_bench;

fn throwaway_registered() -> bool {
    let registered = nimble_sched::algorithms::by_name("throwaway").is_ok() && nimble_sched::algorithms::by_name("throwaway-broken").is_ok();
    if !registered {
        eprintln!("skipped: the throwaway policies are registered only with --features nimble-sched/test-policies");
    }
    registered
}

#[test]
fn registering_a_policy_changes_nothing_committed() {
    if !throwaway_registered() {
        return;
    }
    let listed = String::from_utf8(nimble_bench(&["algos"]).stdout).unwrap();
    assert!(listed.contains("throwaway"), "{listed}");
    let failures = common::rerender_committed_figures();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn a_bad_plan_is_a_failed_row_and_the_rest_of_the_table_prints() {
    if !throwaway_registered() {
        return;
    }
    let figures = common::scratch("policies-figures");
    let graphs = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../paper-figs/results/model-graphs");
    let arguments = ["schedulers", "--simulate", "--graphs", graphs.to_str().unwrap(), "--models", "resnet50,inception-v3", "--algos", "nimble,throwaway-broken,throwaway", "--measured", "none", "--out-dir", figures.to_str().unwrap()];
    let output = nimble_bench(&arguments);
    let (out, err) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert_eq!(output.status.code(), Some(2), "{out}\n{err}");
    for model in ["resnet50", "inception-v3"] {
        let rows: Vec<&str> = out.lines().filter(|l| l.starts_with(model)).collect();
        assert!(rows.iter().any(|l| l.contains(" nimble ")) && rows.iter().any(|l| l.contains(" throwaway ")), "{out}");
        assert!(rows.iter().any(|l| l.contains("throwaway-broken") && l.contains("failed: algorithm throwaway-broken produced an invalid plan: dependency id ")), "{out}");
    }
    // `x single` is filled without `single` listed.
    assert!(out.lines().filter(|l| l.contains(" nimble ")).all(|l| !l.split_whitespace().nth(7).unwrap_or("-").starts_with('-')), "{out}");
    assert!(figures.join("schedulers-simulated.svg").is_file(), "the figure of the rows that ran");
    let error: Vec<&str> = err.lines().collect();
    assert_eq!(error.len(), 1, "{err}");
    assert!(error[0].starts_with("error: 2 plan(s) failed the checker") && error[0].contains("model resnet50: algorithm throwaway-broken"), "{err}");

    let compare = nimble_bench(&["compare", "--synthetic", "nasnet:2", "--algos", "nimble,throwaway-broken,single"]);
    let out = String::from_utf8_lossy(&compare.stdout);
    assert_eq!(compare.status.code(), Some(2), "{out}");
    assert!(out.lines().any(|l| l.starts_with("single ")) && out.contains("throwaway-broken failed: "), "{out}");
}
