//! `nimble-bench`: the command-line driver of the Nimble project.
//!
//! The top layer: it parses arguments, loads graphs, calls the library crates and prints
//! results. Errors are printed as one line and exit with status 2.

mod gpu;
mod output;
mod plots;
mod scheduling;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use scheduling::{Mode, PlanArgs, SimulatorArgs};

#[derive(Parser, Debug)]
#[command(name = "nimble-bench", version, about = "Nimble: ahead-of-time, multi-stream GPU task scheduling — scheduling, simulation and experiments")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// List the registered stream-assignment algorithms
    Algos,
    /// Assign streams to a task graph and print the plan
    Assign {
        #[command(flatten)]
        plan: PlanArgs,
        /// Print one JSON object instead of a summary
        #[arg(long)]
        json: bool,
    },
    /// Simulate a plan on a model GPU and compare it with a single stream
    Simulate {
        #[command(flatten)]
        plan: PlanArgs,
        /// Launch mode
        #[arg(long, value_enum, default_value = "graph")]
        mode: Mode,
        #[command(flatten)]
        simulator: SimulatorArgs,
        #[arg(long)]
        json: bool,
        /// Write the simulated timeline as Chrome-trace JSON (open in Perfetto)
        #[arg(long, value_name = "OUT.json")]
        trace: Option<PathBuf>,
    },
    /// Write the plan as Graphviz DOT, nodes colored by stream, syncs in red
    Dot {
        #[command(flatten)]
        plan: PlanArgs,
        /// Output file (default: stdout)
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Run every registered algorithm (or --algos a,b) on one graph: streams, syncs, simulated time
    Compare {
        #[command(flatten)]
        source: scheduling::GraphSource,
        /// Comma-separated algorithm names (default: all registered)
        #[arg(long)]
        algos: Option<String>,
        #[command(flatten)]
        simulator: SimulatorArgs,
        #[arg(long)]
        json: bool,
    },
    /// Run a plan on the GPU with synthetic kernels (one per node, lasting its duration_us):
    /// measured makespan beside the simulator's prediction
    Synth {
        #[command(flatten)]
        plan: PlanArgs,
        #[arg(long, value_enum, default_value = "graph")]
        mode: Mode,
        #[command(flatten)]
        measure: gpu::MeasureArgs,
        #[arg(long)]
        json: bool,
    },
    /// Measure the simulator-validation suite on the GPU (every algorithm, both modes) and write
    /// the result record
    ValidateSimulator {
        /// Result record to write
        #[arg(long, default_value = "paper-figs/results/simulator-validation.json")]
        out: PathBuf,
        /// Which graphs to measure
        #[arg(long, value_enum, default_value = "full")]
        suite: gpu::Suite,
        #[command(flatten)]
        measure: gpu::MeasureArgs,
    },
    /// Re-simulate a committed simulator-validation record with today's model (no GPU needed)
    SimulatorReport {
        #[arg(long, default_value = "paper-figs/results/simulator-validation.json")]
        results: PathBuf,
        /// Also draw simulated against measured as SVG
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
    },
    /// Fit the simulator's parameters to a simulator-validation record (no GPU needed); prints
    /// them as JSON for --sim-config
    CalibrateSimulator {
        #[arg(long, default_value = "paper-figs/results/simulator-validation.json")]
        results: PathBuf,
        /// Also write the fitted parameters to this file
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Generate a synthetic task graph as JSON
    Gen {
        /// chain:N, fan:B[:D], nasnet:C[:SEED], layered:N[:SEED], dnn:N[:SEED]
        #[arg(long, value_name = "SPEC")]
        synthetic: String,
        /// Output file (default: stdout)
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Algos => scheduling::algos(),
        Command::Assign { plan, json } => scheduling::assign(&plan.source, &plan.algo, json),
        Command::Simulate { plan, mode, simulator, json, trace } => {
            scheduling::simulate_command(&plan.source, &plan.algo, mode, &simulator, json, trace.as_ref())
        }
        Command::Dot { plan, out } => scheduling::dot(&plan.source, &plan.algo, out.as_ref()),
        Command::Compare { source, algos, simulator, json } => scheduling::compare(&source, algos.as_deref(), &simulator, json),
        Command::Synth { plan, mode, measure, json } => gpu::synth(&plan.source, &plan.algo, mode, &measure, json),
        Command::ValidateSimulator { out, suite, measure } => gpu::validate_simulator(&out, suite, &measure),
        Command::SimulatorReport { results, svg } => gpu::simulator_report(&results, svg.as_ref()),
        Command::CalibrateSimulator { results, out } => gpu::calibrate_simulator(&results, out.as_ref()),
        Command::Gen { synthetic, out } => scheduling::generate(&synthetic, out.as_ref()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse(); // usage errors: clap prints them and exits with status 2
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
