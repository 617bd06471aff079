//! `nimble-bench`: the command-line driver of the Nimble project.
//!
//! The top layer: it parses arguments, loads graphs, calls the library crates and prints
//! results. Errors are printed as one line and exit with status 2.

mod bars;
mod command_args;
mod coverage;
mod coverage_figure;
#[cfg(feature = "torch")]
mod coverage_run;
#[cfg(feature = "torch")]
mod allreduce;
#[cfg(feature = "torch")]
mod data_parallel;
#[cfg(feature = "torch")]
mod ranks;
mod example;
mod figure_inference;
mod figure_training;
mod figures;
mod fused_fit;
mod fused_report;
mod gpu;
mod libtorch;
mod output;
mod plots;
mod records_index;
mod research;
mod same_process;
mod training_backend;
mod scaling_figure;
mod scheduling;
mod study;
mod sys;
#[cfg(feature = "torch")]
mod torch;
#[cfg(feature = "torch")]
mod torch_cli;
#[cfg(feature = "torch")]
mod torch_measure;
#[cfg(feature = "torch")]
mod torch_profile;
#[cfg(feature = "torch")]
mod torch_train;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use scheduling::{Mode, PlanArgs, SimulatorArgs};

/// The committed model task graphs `schedulers --simulate` reads by default.
const DEFAULT_GRAPHS: &str = "paper-figs/results/model-graphs";
// The committed records the figures re-render by default (another record draws elsewhere:
// `records_figures_dir`).
const COVERAGE_RECORD: &str = "paper-figs/results/coverage.json";
const SCALING_RECORD: &str = "paper-figs/results/scaling/scaling-283e232.json";
const SAME_PROCESS_RECORD: &str = "paper-figs/results/same-process/same-process-425f454.json";
const TRAINING_BACKEND_RECORD: &str = "paper-figs/results/training-backend/training-backend-93c4aa5-b32.json";

#[derive(Parser, Debug)]
#[command(name = "nimble-bench", version, about = "Nimble: ahead-of-time, multi-stream GPU task scheduling — scheduling, simulation and experiments")]
#[cfg_attr(
    not(feature = "torch"),
    command(after_help = "Built without the `torch` feature: models, export-graph, infer, profile, train and coverage DIR need libtorch (build with the default features).")
)]
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
    /// Re-simulate a committed simulator-validation record with today's model (no GPU needed);
    /// with --graphs, the fused-kernel graphs of DIR against the backend's in-graph timings
    SimulatorReport {
        #[arg(long, default_value = "paper-figs/results/simulator-validation.json", conflicts_with = "graphs")]
        results: PathBuf,
        /// Also draw simulated against measured as SVG
        #[arg(long, value_name = "FILE", conflicts_with = "graphs")]
        svg: Option<PathBuf>,
        /// A fused-kernel graph directory whose provenance.json has the backend's in-graph
        /// timings (e.g. paper-figs/results/fused-kernel-graphs-launches-h100): simulated on one
        /// stream and under nimble's plan, against them
        #[arg(long, value_name = "DIR")]
        graphs: Option<PathBuf>,
        /// With --graphs: same-process records with the backend's whole-call latency, for the
        /// per-call host term (fitted leave-one-model-out); a directory: every record under it
        /// measured on the graphs' GPU, the newest of each cell
        #[arg(long, value_name = "FILE|DIR", requires = "graphs")]
        whole_call: Vec<PathBuf>,
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
    #[cfg(feature = "torch")]
    #[command(flatten)]
    Torch(torch_cli::TorchCommand),
    /// List the paper's figures, their figN aliases and which can be made today
    Figures,
    /// Figure (alias fig5): inference speedup over tch eager for every zoo model; measures on a
    /// GPU, otherwise re-renders from the committed record
    Inference {
        /// Comma-separated model names, or `all`
        #[arg(long, default_value = "all", value_parser = zoo_models)]
        models: String,
        #[arg(long, allow_negative_numbers = true, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..))]
        batch: i64,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// Figure: training step speedup over tch eager on CIFAR-10 (autograd mode, whole-step graph
    /// on one stream and on Nimble's streams); measures on a GPU, otherwise re-renders from the
    /// committed record
    Training {
        /// Comma-separated training models, or `all`
        #[arg(long, default_value = "all", value_parser = training_models)]
        models: String,
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true, default_value = "32,64,128", value_parser = clap::value_parser!(i64).range(1..))]
        batch: Vec<i64>,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// Figure (alias fig2a): GPU busy time over wall time at batch 1 (tch eager, Nimble), from
    /// the schedulers experiment; measures on a GPU, otherwise re-renders
    Overhead {
        /// Comma-separated model names, or `all`
        #[arg(long, default_value = "all", value_parser = zoo_models)]
        models: String,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// Figure: per model, width, Nimble's streams and syncs, and the speedup of Nimble's streams
    /// over one stream, measured and simulated; from the schedulers experiment
    Multistream {
        /// Comma-separated model names, or `all`
        #[arg(long, default_value = "all", value_parser = zoo_models)]
        models: String,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// Figure: every registered stream-assignment algorithm on every zoo model, speedup over one
    /// stream, measured and simulated; measures on a GPU, otherwise re-renders. With --simulate:
    /// every committed model task graph simulated, no GPU or libtorch needed
    Schedulers {
        /// Comma-separated model names, or `all`
        #[arg(long, default_value = "all")]
        models: String,
        /// Simulate each algorithm on the committed model task graphs (*.graph.json in
        /// --graphs) instead of measuring: streams, syncs, assignment time, simulated latency,
        /// speedup over one stream and over the floor; draws <out-dir>/schedulers-simulated.svg
        /// (default target/figures; with --out-dir paper-figs and another --graphs than the
        /// default, under paper-figs/<DIR's name>/) and, with --results FILE, writes the record
        /// there (the committed one is paper-figs/results/schedulers-simulated.json)
        #[arg(long)]
        simulate: bool,
        /// With --simulate: comma-separated algorithms (default: every registered one)
        #[arg(long, requires = "simulate")]
        algos: Option<String>,
        /// With --simulate: the directory of model task graphs
        #[arg(long, value_name = "DIR", default_value = DEFAULT_GRAPHS, requires = "simulate")]
        graphs: PathBuf,
        /// With --simulate: a measured `schedulers` record to put beside the simulation, with
        /// each run's error (default: paper-figs/results/schedulers.json when it exists; `none`
        /// for no comparison)
        #[arg(long, value_name = "FILE", requires = "simulate")]
        measured: Option<PathBuf>,
        /// Measuring (GPU): after every measurement, write each model's task graph with each
        /// op's time from its own kernels (what --simulate reads) to DIR/<model>.graph.json
        #[arg(long, value_name = "DIR", conflicts_with = "simulate")]
        kernel_graphs: Option<PathBuf>,
        #[command(flatten)]
        simulator: SimulatorArgs,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// GPU: every model of a population exported by experiments/python/export_torchscript.py
    /// DIR, each run by `infer --torchscript` in its own process (eager, one-stream graph and
    /// Nimble, with and without the rewrites, each graph checked against eager), gathered with
    /// the class of every failure into a record and a figure; without DIR, re-renders the record
    Coverage {
        /// The exporter's directory: manifest.json and the .pt files
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Comma-separated names of the manifest's models to run (default: all)
        #[arg(long, value_delimiter = ',', requires = "dir")]
        only: Vec<String>,
        /// Seconds one model's process may run before it is killed (and recorded as a timeout)
        #[arg(long, allow_negative_numbers = true, default_value_t = 300)]
        timeout: u64,
        #[arg(long, allow_negative_numbers = true, default_value_t = 50)]
        warmup: usize,
        #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
        iters: usize,
        /// Records measured in parts (comma-separated), merged into --results; no GPU needed
        #[arg(long, value_delimiter = ',', value_name = "FILES", conflicts_with = "dir")]
        merge: Vec<PathBuf>,
        /// The record to write (measuring, merging; rewritten after every model) or read
        #[arg(long, default_value = COVERAGE_RECORD)]
        results: PathBuf,
        /// Where the figure goes (<out-dir>/coverage.svg and .png)
        #[arg(long, default_value = "paper-figs")]
        out_dir: PathBuf,
    },
    /// Figure: data-parallel training throughput on 1, 2, … GPUs (Nimble's whole step with NCCL
    /// in the graph, PyTorch DDP captured and eager), rendered from the records `train --gpus`
    /// and experiments/python/ddp.py wrote on the GPU machine; no GPU needed
    Scaling {
        /// The scaling record (nimble-bench train --gpus --out)
        #[arg(long, default_value = SCALING_RECORD)]
        results: PathBuf,
        /// The PyTorch DDP record of the same session (experiments/python/ddp.py --out)
        #[arg(long, value_name = "FILE", default_value = "paper-figs/results/scaling/pytorch-ddp-283e232.json")]
        ddp: Option<PathBuf>,
        /// The forward graphs of the one-GPU measurement (train --gpus --graphs DIR): with them,
        /// the simulator projects the step to --sim-gpus and predicts the measured GPU counts
        #[arg(long, value_name = "DIR", default_value = "paper-figs/results/scaling-graphs-283e232")]
        graphs: Option<PathBuf>,
        /// The all-reduce record whose ring model prices the collectives (allreduce --out)
        #[arg(long, value_name = "FILE", default_value = "paper-figs/results/scaling/allreduce-283e232.json")]
        allreduce: PathBuf,
        /// The stream assignment the projection plans the step with
        #[arg(long, default_value = "nimble")]
        algo: String,
        /// GPU counts to project beside the measured ones (comma-separated)
        #[arg(long, value_delimiter = ',', default_value = "4,8", value_parser = gpu_count)]
        sim_gpus: Vec<usize>,
        /// A backward op's time over its forward op's in the step graph
        #[arg(long, allow_hyphen_values = true, default_value_t = 2.0)]
        backward_factor: f64,
        /// How much slower compute runs beside an all-reduce, 1 (not at all) to 1.5: NCCL's
        /// kernels take SMs and memory bandwidth (a ResNet-50 profile suggests about 2; 1.5 is
        /// the most the simulator's sharing rule expresses)
        #[arg(long, allow_hyphen_values = true, default_value_t = 1.5)]
        collective_slowdown: f64,
        /// The fused optimizer's speed, GB/s of parameters updated, so that each bucket's update
        /// is priced and runs beside the last all-reduces as the executor runs them since
        /// ba7710e (the H200's SGD: 619); 0 folds the update into the compute, as for records
        /// measured before that
        #[arg(long, allow_hyphen_values = true, default_value_t = 0.0)]
        optimizer_gbs: f64,
        /// Where the figure goes (<out-dir>/scaling.svg and .png)
        #[arg(long, default_value = "paper-figs")]
        out_dir: PathBuf,
    },
    /// Figure: the same-process comparison (PyTorch eager, torch.cuda.graph, torch.compile
    /// reduce-overhead and Nimble from Python, in one process), rendered from the records
    /// experiments/python/same_process.py wrote on the GPU machine; no GPU needed
    SameProcess {
        /// The records (comma-separated), each a part measured in one process
        #[arg(long, value_delimiter = ',', value_name = "FILES", default_value = SAME_PROCESS_RECORD)]
        results: Vec<PathBuf>,
        /// Where the figure goes (<out-dir>/same-process.svg)
        #[arg(long, default_value = "paper-figs")]
        out_dir: PathBuf,
    },
    /// Figure: a full SGD step through torch.compile(backend="nimble") against reduce-overhead
    /// and eager, rendered from the records experiments/python/training_backend.py wrote on the
    /// GPU machine; no GPU needed
    TrainingBackend {
        /// The records (comma-separated)
        #[arg(long, value_delimiter = ',', value_name = "FILES", default_value = TRAINING_BACKEND_RECORD)]
        results: Vec<PathBuf>,
        /// Where the figure goes (<out-dir>/training-backend.svg)
        #[arg(long, default_value = "paper-figs")]
        out_dir: PathBuf,
    },
    /// Figure: a small DAG through the steps of Nimble's stream assignment (graph, MEG,
    /// bipartite matching, chains, streams and syncs), from nimble-sched's own output
    AlgorithmExample {
        /// A task graph (JSON) to draw instead of the built-in example (up to 24 nodes)
        #[arg(long, value_name = "FILE", conflicts_with = "synthetic")]
        graph: Option<PathBuf>,
        /// A synthetic graph to draw instead (chain:N, fan:B[:D], …)
        #[arg(long, value_name = "SPEC")]
        synthetic: Option<String>,
        /// Where the figure goes (<out-dir>/algorithm-example.svg)
        #[arg(long, default_value = "paper-figs")]
        out_dir: PathBuf,
    },
    /// Policies x graph sets (the zoo's, the coverage set's and Inductor's fused-kernel graphs),
    /// simulated: a table, a figure with the simulator's validated error as bands, and a record
    /// with its provenance, written into --out-dir (study.json, study.svg, study.png); no GPU
    Study {
        /// Comma-separated algorithms (default: every registered one)
        #[arg(long)]
        algos: Option<String>,
        /// The directory to write into (created if missing)
        #[arg(long, value_name = "DIR")]
        out_dir: PathBuf,
        #[command(flatten)]
        simulator: scheduling::SimulatorArgs,
    },
    /// Index of the committed records: one row per file under --dir (path, experiment, models,
    /// dtype, batch, GPU, commit, date, headline), read from each record; prints it, or writes it
    /// with --out (the committed index is paper-figs/results/INDEX.md, which CI checks)
    RecordsIndex {
        #[arg(long, value_name = "DIR", default_value = "paper-figs/results")]
        dir: PathBuf,
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

/// `--models` of the zoo's figures: `all` or zoo models, checked when parsed.
fn zoo_models(list: &str) -> Result<String, String> {
    experiments::zoo::selection(list, false).map(|_| list.to_string())
}

/// `--models` of the training figure: `all` or models the paper trains.
fn training_models(list: &str) -> Result<String, String> {
    experiments::zoo::selection(list, true).map(|_| list.to_string())
}

/// The most GPUs `scaling --sim-gpus` projects to: a data-parallel job of a few thousand GPUs,
/// beyond which the simulator's ring model and its numbers mean nothing.
const MAX_SIMULATED_GPUS: usize = 4096;

/// One of `--sim-gpus`: 1 to `MAX_SIMULATED_GPUS`.
fn gpu_count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_SIMULATED_GPUS).contains(&n) => Ok(n),
        _ => Err(format!("expected a GPU count from 1 to {MAX_SIMULATED_GPUS}")),
    }
}

/// What every figure command takes besides its models and batch sizes.
#[derive(clap::Args, Debug)]
struct FigureArgs {
    #[arg(long, allow_negative_numbers = true, default_value_t = 50)]
    warmup: usize,
    #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
    iters: usize,
    /// Re-render from the record even on a machine with a GPU
    #[arg(long)]
    from_results: bool,
    /// The record to write (measuring) or read (re-rendering); default
    /// paper-figs/results/<figure>.json (overhead, multistream and schedulers share
    /// schedulers.json)
    #[arg(long, value_name = "FILE")]
    results: Option<PathBuf>,
    /// Where the figure goes (<out-dir>/<figure>.svg); default paper-figs, where re-renders of
    /// the committed records draw what is committed, except for `schedulers --simulate`, whose
    /// figures depend on the registered algorithms: target/figures unless given
    #[arg(long)]
    out_dir: Option<PathBuf>,
}

impl FigureArgs {
    /// `--out-dir`, or `paper-figs`.
    fn committed_out_dir(&self) -> PathBuf {
        self.out_dir.clone().unwrap_or_else(|| PathBuf::from("paper-figs"))
    }

    fn rendering(&self, figure: &str) -> command_args::Rendering {
        command_args::Rendering {
            warmup: self.warmup,
            iterations: self.iters,
            from_results: self.from_results,
            results: self.results.clone().unwrap_or_else(|| PathBuf::from(format!("paper-figs/results/{figure}.json"))),
            out_dir: match &self.results {
                Some(results) => records_figures_dir(&self.committed_out_dir(), results, &format!("paper-figs/results/{figure}.json")),
                None => self.committed_out_dir(),
            },
        }
    }
}

/// Where `schedulers --simulate` draws without `--out-dir`.
const SIMULATED_FIGURES: &str = "target/figures";

/// Where `schedulers --simulate --out-dir paper-figs` draws: `paper-figs` holds the figures of
/// the default graphs (committed), so another set's go under `paper-figs/<its directory's
/// name>/` (as the coverage set's do) instead of over them.
fn simulated_figures_dir(out_dir: &std::path::Path, graphs: &std::path::Path) -> PathBuf {
    match graphs.file_name() {
        Some(name) if out_dir == std::path::Path::new("paper-figs") && Some(name) != std::path::Path::new(DEFAULT_GRAPHS).file_name() => out_dir.join(name),
        _ => out_dir.to_path_buf(),
    }
}

/// Where a figure re-rendered from `results` draws: the default `paper-figs` holds the figures
/// of the committed records, so another record's go under `paper-figs/<its file stem>/` instead
/// of over them; an `--out-dir` given is taken as it is.
fn records_figures_dir(out_dir: &std::path::Path, results: &std::path::Path, default_results: &str) -> PathBuf {
    match results.file_stem() {
        Some(stem) if out_dir == std::path::Path::new("paper-figs") && results != std::path::Path::new(default_results) => out_dir.join(stem),
        _ => out_dir.to_path_buf(),
    }
}

/// `records_figures_dir` for a figure drawn from several records: named by the first, unless
/// they are the default record alone.
fn records_dir(out_dir: &std::path::Path, results: &[PathBuf], default_results: &str) -> PathBuf {
    match results {
        [one] => records_figures_dir(out_dir, one, default_results),
        [first, ..] => records_figures_dir(out_dir, first, ""),
        [] => out_dir.to_path_buf(),
    }
}

fn run(cli: Cli, invoked_as: &str) -> anyhow::Result<()> {
    match cli.command {
        Command::Figures => figures::list(),
        Command::Inference { models, batch, figure } => figure_inference::inference(invoked_as, &models, batch, &figure.rendering("inference")),
        Command::Training { models, batch, figure } => figure_training::training(invoked_as, &models, &batch, &figure.rendering("training")),
        Command::Overhead { models, figure } => figures::from_schedulers_record(invoked_as, "overhead", &models, None, &figure.rendering("schedulers")),
        Command::Multistream { models, figure } => figures::from_schedulers_record(invoked_as, "multistream", &models, None, &figure.rendering("schedulers")),
        Command::Schedulers { models, simulate: true, algos, graphs, measured, simulator, figure, .. } => research::simulate_schedulers(&research::SimulateArgs {
            measured: match measured {
                Some(p) if p.as_os_str() == "none" => None,
                Some(p) => Some(p),
                None => Some(PathBuf::from("paper-figs/results/schedulers.json")).filter(|p| p.exists()),
            }
            .as_deref(),
            models: &models,
            algorithms: algos.as_deref(),
            graphs: &graphs,
            simulator: &simulator,
            // The record only where asked: its assignment times are this machine's, so a re-render
            // with the defaults must not rewrite the committed one.
            results: figure.results.as_deref(),
            // Never over the committed figures unless told: they hold the algorithms their record
            // names, and a newly registered one would redraw them.
            out_dir: &figure.out_dir.as_deref().map_or_else(|| PathBuf::from(SIMULATED_FIGURES), |dir| simulated_figures_dir(dir, &graphs)),
        }),
        Command::Schedulers { models, figure, kernel_graphs, .. } => {
            figures::from_schedulers_record(invoked_as, "schedulers", &models, kernel_graphs.as_deref(), &figure.rendering("schedulers"))
        }
        Command::AlgorithmExample { graph, synthetic, out_dir } => {
            let source = if graph.is_some() || synthetic.is_some() { Some(scheduling::GraphSource::new(graph, synthetic).load()?) } else { None };
            example::algorithm_example(source, &out_dir)
        }
        Command::Algos => scheduling::algos(),
        Command::Assign { plan, json } => scheduling::assign(&plan.source, &plan.algo, json),
        Command::Simulate { plan, mode, simulator, json, trace } => {
            scheduling::simulate_command(&plan.source, &plan.algo, mode, &simulator, json, trace.as_ref())
        }
        Command::Dot { plan, out } => scheduling::dot(&plan.source, &plan.algo, out.as_ref()),
        Command::Compare { source, algos, simulator, json } => scheduling::compare(&source, algos.as_deref(), &simulator, json),
        Command::Synth { plan, mode, measure, json } => gpu::synth(&plan.source, &plan.algo, mode, &measure, json),
        Command::ValidateSimulator { out, suite, measure } => gpu::validate_simulator(&out, suite, &measure),
        Command::Study { algos, out_dir, simulator } => {
            let all = nimble_sched::algorithms::ALGORITHMS.iter().map(|a| a.name).collect::<Vec<_>>().join(",");
            study::study(std::path::Path::new("."), algos.as_deref().unwrap_or(&all), &out_dir, &simulator)
        }
        Command::RecordsIndex { dir, out } => records_index::records_index(&dir, out.as_ref()),
        Command::SimulatorReport { graphs: Some(dir), whole_call, .. } => fused_report::fused_report(&dir, &whole_call),
        Command::SimulatorReport { results, svg, .. } => gpu::simulator_report(&results, svg.as_ref()),
        Command::CalibrateSimulator { results, out } => gpu::calibrate_simulator(&results, out.as_ref()),
        #[cfg(feature = "torch")]
        Command::Torch(command) => torch_cli::run(command),
        Command::Coverage { dir, only, timeout, warmup, iters, merge, results, out_dir } => coverage::coverage(&command_args::CoverageArgs {
            dir: dir.as_deref(),
            only: &only,
            timeout: std::time::Duration::from_secs(timeout),
            warmup,
            iterations: iters,
            merge: &merge,
            results: &results,
            out_dir: &records_figures_dir(&out_dir, &results, COVERAGE_RECORD),
        }),
        Command::Scaling { results, ddp, graphs, allreduce, algo, sim_gpus, backward_factor, collective_slowdown, optimizer_gbs, out_dir } => {
            let simulated = graphs
                .as_deref()
                .map(|graphs| scaling_figure::Simulated { graphs, allreduce: &allreduce, algorithm: &algo, gpus: &sim_gpus, backward_factor, collective_slowdown, optimizer_bytes_per_us: optimizer_gbs * 1e3 });
            scaling_figure::scaling(&results, ddp.as_ref(), simulated.as_ref(), &records_figures_dir(&out_dir, &results, SCALING_RECORD))
        }
        Command::SameProcess { results, out_dir } => same_process::same_process(&results, &records_dir(&out_dir, &results, SAME_PROCESS_RECORD)),
        Command::TrainingBackend { results, out_dir } => training_backend::training_backend(&results, &records_dir(&out_dir, &results, TRAINING_BACKEND_RECORD)),
        Command::Gen { synthetic, out } => scheduling::generate(&synthetic, out.as_ref()),
    }
}

fn main() -> ExitCode {
    sys::die_quietly_on_a_closed_pipe();
    sys::clean_up_on_interrupt();
    // `figN` aliases live in one table (figures::FIGURES): map them to their command here.
    // As the OS gave them: an argument that is not UTF-8 (a file name, say) reaches clap, which
    // refuses it in one line where a String is expected, instead of std::env::args' panic.
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked_as = args.get(1).map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
    if let Some(figure) = figures::FIGURES.iter().find(|f| f.name == invoked_as || f.aliases.contains(&invoked_as.as_str())) {
        if let Some(pending) = figure.pending {
            eprintln!("error: `{invoked_as}` is the {} figure ({}), which cannot be made yet: it needs {pending}", figure.name, figure.what);
            return ExitCode::from(2);
        }
        args[1] = figure.name.into();
    }
    if !libtorch::PRESENT && libtorch::COMMANDS.contains(&invoked_as.as_str()) {
        eprintln!("error: {}", libtorch::missing(&format!("`{invoked_as}`")));
        return ExitCode::from(2);
    }
    let cli = Cli::parse_from(args); // usage errors: clap prints them and exits with status 2
    // A panic (libtorch's C++ errors reach us as tch's panics, their frames kilobytes long) is
    // one error line too; NIMBLE_VERBOSE=1 prints the whole message.
    let verbose = std::env::var_os("NIMBLE_VERBOSE").is_some_and(|v| v == "1");
    std::panic::set_hook(Box::new(move |info| {
        if verbose {
            eprintln!("{info}");
        }
    }));
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(cli, &invoked_as))) {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(error)) => {
            let text = format!("{error:#}");
            let short = without_frames(&text);
            // (libtorch's own sentence can run to a paragraph: its first 200 characters)
            let short = if short == text { short } else { truncated(&short) };
            let more = if verbose || short == text { "" } else { " (NIMBLE_VERBOSE=1 prints libtorch's C++ frames)" };
            eprintln!("error: {}{more}", if verbose { &text } else { &short });
            ExitCode::from(2)
        }
        Err(payload) => {
            let message = payload.downcast_ref::<String>().map(String::as_str).or_else(|| payload.downcast_ref::<&str>().copied()).unwrap_or("");
            eprintln!("error: {}{}", one_line(message), if verbose { "" } else { " (NIMBLE_VERBOSE=1 prints the whole message)" });
            ExitCode::from(2)
        }
    }
}

/// An error's text without the C++ frames libtorch appends to its errors (from `Exception
/// raised from` on), its lines joined into one.
fn without_frames(text: &str) -> String {
    let lines: Vec<&str> = text.lines().take_while(|l| !l.starts_with("Exception raised from") && !l.starts_with("frame #")).map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join(" ")
}

/// A panic's message as one line of at most 200 characters: its first line, without the
/// `Result::unwrap()` wrapper tch's errors arrive in.
fn one_line(message: &str) -> String {
    // (tch's errors are Debug-formatted: their newlines are the two characters `\n`.)
    let first = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("an internal error");
    let first = first.split("\\n").next().unwrap_or(first);
    truncated(first.trim_start_matches("called `Result::unwrap()` on an `Err` value: ").trim_start_matches("Torch(\"").trim_end_matches("\")"))
}

/// `text`'s first 200 characters, `…` marking a cut.
fn truncated(text: &str) -> String {
    let mut line: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        line.push('…');
    }
    line
}
