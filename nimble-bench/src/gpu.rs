//! Commands that run on a GPU (`synth`, `validate-simulator`) and the offline report of what
//! they measured (`simulator-report`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use experiments::simulator_validation::{self, RunOptions, ValidationRecord, HOLDOUT_SUITE, QUICK_SUITE, SUITE};
use nimble_cuda::{Gpu, SpinKernel, SyntheticExecutor};
use nimble_sched::{algorithms, simulate, Analysis, LaunchMode, SimulatorConfig};
use serde_json::json;

use crate::output::{emit, emit_json, write_file};
use crate::scheduling::{GraphSource, Mode};

/// Measurement settings shared by the GPU commands; defaults are the paper's method.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct MeasureArgs {
    /// Untimed runs before timing
    #[arg(long, allow_negative_numbers = true, default_value_t = 50)]
    warmup: usize,
    /// Timed runs (the median is reported)
    #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
    iters: usize,
    /// Blocks (SMs) each synthetic kernel occupies
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    blocks: u32,
}

impl MeasureArgs {
    fn options(&self) -> Result<RunOptions> {
        anyhow::ensure!(self.iters >= 1, "--iters must be at least 1");
        anyhow::ensure!(self.blocks >= 1, "--blocks must be at least 1");
        Ok(RunOptions { warmup: self.warmup, iterations: self.iters, blocks: self.blocks })
    }
}

/// Which graphs `validate-simulator` measures.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum Suite {
    /// the calibration suite (15 graphs)
    Full,
    /// held-out graphs with other seeds and sizes, to test a calibration
    Holdout,
    /// four small graphs, for a smoke run
    Quick,
}

/// `synth`: run a graph's plan with synthetic kernels; print measured and simulated makespan.
pub fn synth(source: &GraphSource, algorithm: &str, mode: Mode, measure: &MeasureArgs, as_json: bool) -> Result<()> {
    let graph = source.load()?;
    let options = measure.options()?;
    let plan = algorithms::by_name(algorithm)?.assign(&Analysis::new(&graph));
    let gpu = Gpu::open(0)?;
    let kernel = SpinKernel::new(&gpu, options.blocks)?;
    let executor = SyntheticExecutor::new(&gpu, &kernel, &graph, &plan, 0.0)?;
    let mode = LaunchMode::from(mode);
    let measured = executor.measure(mode, options.warmup, options.iterations)?;
    let simulated = simulate(&graph, &plan, &SimulatorConfig::for_graph(mode, &graph)).makespan_us;
    if as_json {
        return emit_json(&json!({
            "algorithm": plan.algorithm, "mode": mode, "nodes": graph.len(), "streams": plan.streams,
            "syncs": plan.syncs.len(), "measured_median_us": measured.median_us, "measured": measured,
            "simulated_us": simulated, "gpu": gpu.info(), "cycles_per_us": kernel.cycles_per_us,
        }));
    }
    emit(&format!(
        "{} on {}: {} mode, {} streams, {} syncs; measured {:.1} µs (median of {}, mean {:.1}, stdev {:.1}); simulated {:.1} µs ({:+.1}%)",
        plan.algorithm,
        gpu.info().name,
        mode.name(),
        plan.streams,
        plan.syncs.len(),
        measured.median_us,
        options.iterations,
        measured.mean_us,
        measured.stdev_us,
        simulated,
        (simulated - measured.median_us) / measured.median_us * 100.0
    ))
}

/// `validate-simulator`: the whole suite, every algorithm, both modes; writes the record.
pub fn validate_simulator(out: &Path, suite: Suite, measure: &MeasureArgs) -> Result<()> {
    let gpu = Gpu::open(0)?;
    let suite = match suite {
        Suite::Full => SUITE,
        Suite::Holdout => HOLDOUT_SUITE,
        Suite::Quick => QUICK_SUITE,
    };
    eprintln!("measuring {} graphs × {} algorithms × 2 modes on {}", suite.len(), simulator_validation::algorithm_names().len(), gpu.info().name);
    let record = simulator_validation::run_suite(&gpu, suite, measure.options()?, |run| {
        eprintln!(
            "  {:<16} {:<14} {:<5} {:>10.1} µs measured {:>10.1} µs simulated",
            format!("{}{}", run.graph, if run.zero_durations { "/0" } else { "" }),
            run.algorithm,
            run.mode.name(),
            run.measured.median_us,
            run.simulated_us
        )
    })
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    write_file(out, &serde_json::to_string_pretty(&record)?)?;
    report(&record, None)
}

/// `calibrate-simulator`: fit the simulator's parameters to a record; print them as JSON (usable
/// with `--sim-config`) and the errors before and after.
pub fn calibrate_simulator(results: &Path, out: Option<&PathBuf>) -> Result<()> {
    let record = read_record(results)?;
    let prepared = simulator_validation::PreparedRuns::new(&record).map_err(|e| anyhow::anyhow!("{e}"))?;
    let (graph_start, eager_start) = (SimulatorConfig::graph(), SimulatorConfig::eager());
    let before = prepared.evaluate(&graph_start, &eager_start);
    let graph = prepared.fit(&graph_start);
    let eager = prepared.fit(&SimulatorConfig { dispatch_us: graph.dispatch_us, ..eager_start });
    let after = prepared.evaluate(&graph, &eager);
    let mut fitted = serde_json::to_value(SimulatorConfig { mode: LaunchMode::Graph, ..eager.clone() })?;
    let fields = fitted.as_object_mut().expect("a config is an object");
    fields.remove("mode");
    for key in ["graph_launch_us", "graph_branch_us", "graph_dependency_latency_us", "dispatch_us"] {
        fields.insert(key.into(), serde_json::to_value(&graph)?[key].clone());
    }
    let text = serde_json::to_string_pretty(&fitted)?;
    if let Some(path) = out {
        write_file(path, &text)?;
    }
    emit(&text)?;
    // The summary on stderr: stdout is the config alone, so `> cal.json` reads back with --sim-config.
    eprintln!(
        "median |error|: graph {:.1}% -> {:.1}%, eager {:.1}% -> {:.1}% over {} runs of {}",
        before.median_abs_error_graph * 100.0,
        after.median_abs_error_graph * 100.0,
        before.median_abs_error_eager * 100.0,
        after.median_abs_error_eager * 100.0,
        record.runs.len(),
        record.provenance.gpu
    );
    Ok(())
}

fn read_record(path: &Path) -> Result<ValidationRecord> {
    let context = || format!("reading {}", path.display());
    let text = nimble_graph::json::read_text(path)?;
    serde_json::from_str(&text).with_context(context)
}

/// `simulator-report`: re-simulate a committed record with today's model; optionally plot.
pub fn simulator_report(results: &Path, svg: Option<&PathBuf>) -> Result<()> {
    report(&read_record(results)?, svg)
}

fn report(record: &ValidationRecord, svg: Option<&PathBuf>) -> Result<()> {
    let evaluation = simulator_validation::evaluate(record, &SimulatorConfig::graph(), &SimulatorConfig::eager())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let p = &record.provenance;
    emit(&format!(
        "measured on {} (CUDA {} driver, {} SMs) at {} by commit {}; {} warm-ups, {} timed runs, median",
        p.gpu, p.driver_cuda_version, p.multiprocessors, p.date_utc, p.commit, p.warmup, p.iterations
    ))?;
    emit(&format!("{:<18} {:<14} {:<6} {:>12} {:>12} {:>8}", "graph", "algorithm", "mode", "measured µs", "simulated µs", "error"))?;
    for run in &evaluation.runs {
        emit(&format!(
            "{:<18} {:<14} {:<6} {:>12.1} {:>12.1} {:>+7.1}%",
            format!("{}{}", run.graph, if run.zero_durations { "/0" } else { "" }),
            run.algorithm,
            run.mode.name(),
            run.measured_us,
            run.simulated_us,
            run.relative_error * 100.0
        ))?;
    }
    emit(&format!(
        "median |simulated − measured| / measured: graph mode {:.1}% (goal ≤ 10%), eager mode {:.1}% (goal ≤ 15%)",
        evaluation.median_abs_error_graph * 100.0,
        evaluation.median_abs_error_eager * 100.0
    ))?;
    for mode in [LaunchMode::Graph, LaunchMode::Eager] {
        let mut errors: Vec<f64> = evaluation.runs.iter().filter(|r| r.mode == mode).map(|r| r.relative_error.abs() * 100.0).collect();
        errors.sort_by(f64::total_cmp);
        // The nearest-rank percentile, as schedulers --simulate computes it.
        let at = |q: f64| errors[((errors.len() - 1) as f64 * q).round() as usize];
        emit(&format!("{} mode over {} runs: |error| 90th percentile {:.1}%, worst {:.1}%", mode.name(), errors.len(), at(0.9), at(1.0)))?;
    }
    if let Some(path) = svg {
        let png = crate::plots::save(&crate::plots::SimulatedVsMeasured::new(&evaluation, &record.provenance)?, path)?;
        emit(&format!("wrote {} and {}", path.display(), png.display()))?;
    }
    Ok(())
}
