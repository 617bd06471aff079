//! `nimble-bench`: the command-line driver of the Nimble project.
//!
//! The top layer: it parses arguments, loads graphs, calls the library crates and prints
//! results. Errors are printed as one line and exit with status 2.

mod coverage;
mod coverage_figure;
mod example;
mod figures;
mod gpu;
mod output;
mod plots;
mod scheduling;
mod torch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use experiments::inference::{InferConfig, InferMode};
use experiments::torchscript::InputSpec;
use experiments::models::Dataset;

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
    /// List the model zoo: input shapes, parameter counts, reference definitions
    Models {
        /// imagenet (1000 classes, the paper's inference sizes) or cifar10 (the training models,
        /// 10 classes, 32x32)
        #[arg(long, value_enum, default_value = "imagenet")]
        dataset: DatasetArg,
        /// Also trace each model on the CPU: ops, tasks, edges and width of its task graph
        #[arg(long)]
        trace: bool,
        #[arg(long)]
        json: bool,
    },
    /// Trace a model's forward into a task graph (JSON); on CUDA, with each op's measured GPU time
    ExportGraph {
        /// Model name (`nimble-bench models` lists them)
        #[arg(long, required_unless_present = "torchscript")]
        model: Option<String>,
        #[command(flatten)]
        script: ScriptArgs,
        #[arg(long, default_value_t = 1)]
        batch: i64,
        /// Where to trace: cpu needs no GPU; cuda prepares the model and adds duration_us
        #[arg(long, value_enum, default_value = "cpu")]
        device: torch::TraceDevice,
        /// Apply the inference rewrites first (BatchNorm folding; on cuda also conv+add+ReLU fusion)
        #[arg(long)]
        optimize: bool,
        /// Load the model's weights from a .safetensors or .ot file (names as the reference's
        /// state_dict) instead of random ones
        #[arg(long, value_name = "FILE")]
        weights: Option<PathBuf>,
        /// Output file (default: stdout)
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// GPU: inference latency of real models eagerly (tch), as a single-stream CUDA graph and as
    /// Nimble's multi-stream graph, checked against eager; the paper's method
    Infer {
        /// Comma-separated model names (`nimble-bench models` lists them), or `all`
        #[arg(long, default_value = "resnet50")]
        model: String,
        #[command(flatten)]
        script: ScriptArgs,
        /// Comma-separated modes: eager (tch; for --torchscript, the module op by op), torchscript
        /// (libtorch's TorchScript runtime through tch's CModule), graph (one stream), nimble
        #[arg(long, value_enum, value_delimiter = ',', default_value = "eager,torchscript,graph,nimble")]
        mode: Vec<InferModeArg>,
        /// Inference rewrites for the graph modes
        #[arg(long, value_enum, default_value = "on")]
        optimize: torch::Optimize,
        #[command(flatten)]
        prepare: PrepareArgs,
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        #[arg(long, default_value_t = 100)]
        iters: usize,
        /// Load the model's weights from a .safetensors or .ot file (one model only)
        #[arg(long, value_name = "FILE")]
        weights: Option<PathBuf>,
        /// Also write the result record (JSON, with provenance) here
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// GPU: what the device runs in one forward of a prepared model: kernels and copies per
    /// run, the run's span against the time the device was busy, and the kernels that take the
    /// most time (libtorch's Kineto profiler, CUPTI)
    Profile {
        /// One model name (`nimble-bench models` lists them)
        #[arg(long, default_value = "resnet50")]
        model: String,
        #[command(flatten)]
        script: ScriptArgs,
        /// eager (tch), graph (one stream) or nimble
        #[arg(long, value_enum, default_value = "nimble")]
        mode: InferModeArg,
        /// Inference rewrites for the graph modes
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
        optimize: bool,
        #[command(flatten)]
        prepare: PrepareArgs,
        /// Profiled runs, each on a fresh input with the device idle before it
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Kernel names listed, the largest total time first
        #[arg(long, default_value_t = 30)]
        top: usize,
        /// Also write the whole Chrome trace (chrome://tracing, Perfetto) here
        #[arg(long, value_name = "FILE")]
        trace: Option<PathBuf>,
        /// Also write the summary record (JSON, with provenance) here
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// GPU: time of one training step (forward, cross-entropy, backward, SGD momentum) of CIFAR-10
    /// models: tch eager, the whole step as a one-stream CUDA graph, Nimble's autograd mode
    /// (forward and backward graphs) and the whole step on Nimble's streams; each graph mode
    /// checked against eager training first; the paper's method
    Train {
        /// Comma-separated training models (`nimble-bench models --dataset cifar10`), or `all`
        #[arg(long, default_value = "mobilenet-v2")]
        model: String,
        /// Comma-separated batch sizes
        #[arg(long, value_delimiter = ',', default_value = "32")]
        batch: Vec<i64>,
        /// Comma-separated modes: eager, graph (whole step, one stream), nimble (autograd mode),
        /// step (whole step, Nimble's streams); eager-fused and nimble-fused: eager and nimble
        /// with nimble-torch's FusedOptimizer instead of tch's SGD
        #[arg(long, value_delimiter = ',', default_value = "eager,eager-fused,graph,nimble,nimble-fused,step")]
        mode: Vec<String>,
        /// The forward's stream-assignment algorithm in the nimble and step modes
        #[arg(long, default_value = "nimble")]
        algo: String,
        /// Where the backward's ops run: their forward op's stream, or one stream (the paper)
        #[arg(long, value_enum, default_value = "forward")]
        backward_streams: torch::BackwardArg,
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        #[arg(long, default_value_t = 100)]
        iters: usize,
        /// Steps of the check against eager training before timing (0: none)
        #[arg(long, default_value_t = 1)]
        check_steps: usize,
        /// Also write the result record (JSON, with provenance) here
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// List the paper's figures, their figN aliases and which can be made today
    Figures,
    /// Figure (alias fig5): inference speedup over tch eager for every zoo model; measures on a
    /// GPU, otherwise re-renders from the committed record
    Inference {
        /// Comma-separated model names, or `all`
        #[arg(long, default_value = "all")]
        models: String,
        #[arg(long, default_value_t = 1)]
        batch: i64,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// Figure: training step speedup over tch eager on CIFAR-10 (autograd mode, whole-step graph
    /// on one stream and on Nimble's streams); measures on a GPU, otherwise re-renders from the
    /// committed record
    Training {
        /// Comma-separated training models, or `all`
        #[arg(long, default_value = "all")]
        models: String,
        #[arg(long, value_delimiter = ',', default_value = "32,64,128")]
        batch: Vec<i64>,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// Figure (alias fig2a): GPU busy time over wall time at batch 1 (tch eager, Nimble), from
    /// the schedulers experiment; measures on a GPU, otherwise re-renders
    Overhead {
        /// Comma-separated model names, or `all`
        #[arg(long, default_value = "all")]
        models: String,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// Figure: per model, width, Nimble's streams and syncs, and the speedup of Nimble's streams
    /// over one stream, measured and simulated; from the schedulers experiment
    Multistream {
        /// Comma-separated model names, or `all`
        #[arg(long, default_value = "all")]
        models: String,
        #[command(flatten)]
        figure: FigureArgs,
    },
    /// Figure: every registered stream-assignment algorithm on every zoo model, speedup over one
    /// stream, measured and simulated; measures on a GPU, otherwise re-renders
    Schedulers {
        /// Comma-separated model names, or `all`
        #[arg(long, default_value = "all")]
        models: String,
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
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        #[arg(long, default_value_t = 50)]
        warmup: usize,
        #[arg(long, default_value_t = 100)]
        iters: usize,
        /// Records measured in parts (comma-separated), merged into --results; no GPU needed
        #[arg(long, value_delimiter = ',', value_name = "FILES", conflicts_with = "dir")]
        merge: Vec<PathBuf>,
        /// The record to write (measuring, merging; rewritten after every model) or read
        #[arg(long, default_value = "paper-figs/results/coverage.json")]
        results: PathBuf,
        /// Where the figure goes (<out-dir>/coverage.svg and .png)
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

/// What every figure command takes besides its models and batch sizes.
#[derive(clap::Args, Debug)]
struct FigureArgs {
    #[arg(long, default_value_t = 50)]
    warmup: usize,
    #[arg(long, default_value_t = 100)]
    iters: usize,
    /// Re-render from the record even on a machine with a GPU
    #[arg(long)]
    from_results: bool,
    /// The record to write (measuring) or read (re-rendering); default
    /// paper-figs/results/<figure>.json (overhead, multistream and schedulers share
    /// schedulers.json)
    #[arg(long, value_name = "FILE")]
    results: Option<PathBuf>,
    /// Where the figure goes (<out-dir>/<figure>.svg)
    #[arg(long, default_value = "paper-figs")]
    out_dir: PathBuf,
}

impl FigureArgs {
    fn rendering(&self, figure: &str) -> figures::Rendering {
        figures::Rendering {
            warmup: self.warmup,
            iterations: self.iters,
            from_results: self.from_results,
            results: self.results.clone().unwrap_or_else(|| PathBuf::from(format!("paper-figs/results/{figure}.json"))),
            out_dir: self.out_dir.clone(),
        }
    }
}

/// `models --dataset` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum DatasetArg {
    Imagenet,
    Cifar10,
}

/// A TorchScript file in place of a zoo model (`infer`, `profile`, `export-graph`).
#[derive(clap::Args, Debug)]
struct ScriptArgs {
    /// A TorchScript file (`torch.jit.save`) to run instead of a zoo model; give its inputs with
    /// --input
    #[arg(long, value_name = "FILE", conflicts_with = "model")]
    torchscript: Option<PathBuf>,
    /// One per forward argument of --torchscript, in order: shape, dtype (float32, float16,
    /// bfloat16, float64, int64, int32, int16, int8, uint8, bool; default float32) and the range of
    /// the random values ([LOW, HIGH); default: standard normal floats, integers 0 or 1), e.g.
    /// 1x3x224x224 or 1x128:int64:0:30000
    #[arg(long = "input", value_name = "SHAPE[:DTYPE[:LOW:HIGH]]", requires = "torchscript")]
    inputs: Vec<InputSpec>,
    /// Convert the model's floating-point parameters and buffers and its float inputs to this
    /// dtype (float16, bfloat16, float32, float64); eager runs in it too, and the tolerances of
    /// the check against eager follow it
    #[arg(long, value_name = "DTYPE", value_parser = parse_float_kind)]
    dtype: Option<tch::Kind>,
}

fn parse_float_kind(name: &str) -> Result<tch::Kind, String> {
    match experiments::torchscript::parse_kind(name)? {
        kind @ (tch::Kind::Half | tch::Kind::BFloat16 | tch::Kind::Float | tch::Kind::Double) => Ok(kind),
        _ => Err(format!("`{name}` is not a floating-point dtype; expected float16, bfloat16, float32 or float64")),
    }
}

impl ScriptArgs {
    /// The TorchScript file with its inputs, or else the zoo models named by `list`. (clap's
    /// `requires` does not fire when the conflicting --model is given, so it is checked here.)
    fn models<'a>(&'a self, list: &'a str, weights: Option<&'a std::path::Path>) -> anyhow::Result<torch::Models<'a>> {
        match &self.torchscript {
            Some(path) => Ok(torch::Models::TorchScript { path, inputs: &self.inputs, dtype: self.dtype }),
            None if !self.inputs.is_empty() => anyhow::bail!("--input describes a --torchscript file's arguments; zoo models (--model) take --batch"),
            None => Ok(torch::Models::Zoo { list, weights, dtype: self.dtype }),
        }
    }
}

/// How `infer` and `profile` prepare a model: batch, algorithm and the rewrites' choices.
#[derive(clap::Args, Debug)]
struct PrepareArgs {
    #[arg(long, default_value_t = 1)]
    batch: i64,
    /// The stream-assignment algorithm of the nimble mode
    #[arg(long, default_value = "nimble")]
    algo: String,
    /// With the rewrites: fuse convolution(+add)+ReLU into cuDNN's fused kernels
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    fuse: bool,
    /// With the rewrites: Nimble's fused kernels for squeeze-and-excitation blocks and
    /// convolutions followed by SiLU, ReLU, ReLU6 or a residual add
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    fuse_kernels: bool,
    /// With the rewrites: channels-last (NHWC) weights and inputs; auto: on without grouped
    /// (depthwise) convolutions, otherwise both layouts are prepared and timed and the faster kept
    #[arg(long, value_enum, default_value = "auto")]
    channels_last: torch::Switch,
    /// Check each graph against eager in exact float32 (TF32 convolutions off for both), then
    /// prepare it again with libtorch's defaults (TF32 convolutions) for timing; the timed
    /// graph's error is recorded, not judged. For deep networks with random weights, whose
    /// outputs TF32's rounding moves by more than the tolerance even in eager
    #[arg(long)]
    exact_check: bool,
}

impl PrepareArgs {
    fn config(&self, warmup: usize, iterations: usize) -> InferConfig {
        InferConfig {
            batch: self.batch,
            warmup,
            iterations,
            algorithm: self.algo.clone(),
            fuse_conv_relu: self.fuse,
            fuse_kernels: self.fuse_kernels,
            channels_last: self.channels_last.choice(),
            exact_check: self.exact_check,
        }
    }
}

/// `infer --mode` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum InferModeArg {
    /// tch eager
    Eager,
    /// the forward exported as TorchScript, run through tch's CModule
    Torchscript,
    /// one CUDA graph, one stream
    Graph,
    /// one CUDA graph, Nimble's streams
    Nimble,
}

impl From<InferModeArg> for InferMode {
    fn from(mode: InferModeArg) -> InferMode {
        match mode {
            InferModeArg::Eager => InferMode::Eager,
            InferModeArg::Torchscript => InferMode::TorchScript,
            InferModeArg::Graph => InferMode::Graph,
            InferModeArg::Nimble => InferMode::Nimble,
        }
    }
}

fn run(cli: Cli, invoked_as: &str) -> anyhow::Result<()> {
    match cli.command {
        Command::Figures => figures::list(),
        Command::Inference { models, batch, figure } => figures::inference(invoked_as, &models, batch, &figure.rendering("inference")),
        Command::Training { models, batch, figure } => figures::training(invoked_as, &models, &batch, &figure.rendering("training")),
        Command::Overhead { models, figure } => figures::from_schedulers_record(invoked_as, "overhead", &models, &figure.rendering("schedulers")),
        Command::Multistream { models, figure } => figures::from_schedulers_record(invoked_as, "multistream", &models, &figure.rendering("schedulers")),
        Command::Schedulers { models, figure } => figures::from_schedulers_record(invoked_as, "schedulers", &models, &figure.rendering("schedulers")),
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
        Command::SimulatorReport { results, svg } => gpu::simulator_report(&results, svg.as_ref()),
        Command::CalibrateSimulator { results, out } => gpu::calibrate_simulator(&results, out.as_ref()),
        Command::Models { dataset, trace, json } => {
            let dataset = match dataset {
                DatasetArg::Imagenet => Dataset::ImageNet,
                DatasetArg::Cifar10 => Dataset::Cifar10,
            };
            torch::list_models(dataset, trace, json)
        }
        Command::ExportGraph { model, script, batch, device, optimize, weights, out } => {
            let list = model.unwrap_or_default();
            torch::export_graph(script.models(&list, weights.as_deref())?, batch, device, optimize, out.as_ref())
        }
        Command::Infer { model, script, mode, optimize, prepare, warmup, iters, weights, out } => {
            let modes: Vec<InferMode> = mode.into_iter().map(InferMode::from).collect();
            torch::infer(&torch::InferArgs {
                models: script.models(&model, weights.as_deref())?,
                modes: &modes,
                optimize,
                config: prepare.config(warmup, iters),
                out: out.as_deref(),
            })
        }
        Command::Profile { model, script, mode, optimize, prepare, runs, top, trace, out } => torch::profile(&torch::ProfileArgs {
            models: script.models(&model, None)?,
            mode: mode.into(),
            optimize,
            // The paper's method for the unprofiled latency printed beside the profile.
            config: prepare.config(50, 100),
            runs,
            top,
            trace: trace.as_deref(),
            out: out.as_deref(),
        }),
        Command::Train { model, batch, mode, algo, backward_streams, warmup, iters, check_steps, out } => torch::train(&torch::TrainArgs {
            models: &model,
            batches: &batch,
            modes: &mode,
            algorithm: &algo,
            backward_streams: backward_streams.into(),
            warmup,
            iterations: iters,
            check_steps,
            out: out.as_deref(),
        }),
        Command::Coverage { dir, only, timeout, warmup, iters, merge, results, out_dir } => coverage::coverage(&coverage::CoverageArgs {
            dir: dir.as_deref(),
            only: &only,
            timeout: std::time::Duration::from_secs(timeout),
            warmup,
            iterations: iters,
            merge: &merge,
            results: &results,
            out_dir: &out_dir,
        }),
        Command::Gen { synthetic, out } => scheduling::generate(&synthetic, out.as_ref()),
    }
}

fn main() -> ExitCode {
    // `figN` aliases live in one table (figures::FIGURES): map them to their command here.
    let mut args: Vec<String> = std::env::args().collect();
    let invoked_as = args.get(1).cloned().unwrap_or_default();
    if let Some(figure) = figures::FIGURES.iter().find(|f| f.name == invoked_as || f.aliases.contains(&invoked_as.as_str())) {
        if let Some(pending) = figure.pending {
            eprintln!("error: `{invoked_as}` is the {} figure ({}), which cannot be made yet: it needs {pending}", figure.name, figure.what);
            return ExitCode::from(2);
        }
        args[1] = figure.name.to_string();
    }
    let cli = Cli::parse_from(args); // usage errors: clap prints them and exits with status 2
    match run(cli, &invoked_as) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}
