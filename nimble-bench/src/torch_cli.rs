//! The commands that run models and so need libtorch (the `torch` feature): `models`,
//! `export-graph`, `infer`, `profile` and `train`, with the arguments they share.

use std::path::PathBuf;

use clap::Subcommand;
use experiments::inference::{InferConfig, InferMode};
use experiments::models::Dataset;
use experiments::torchscript::InputSpec;

use crate::{allreduce, data_parallel, torch, torch_profile, torch_train};

#[derive(Subcommand, Debug)]
pub(crate) enum TorchCommand {
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
        #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
        batch: i64,
        /// Where to trace: cpu needs no GPU; cuda prepares the model and adds duration_us
        #[arg(long, value_enum, default_value = "cpu")]
        device: torch::TraceDevice,
        /// Apply the inference rewrites first (BatchNorm folding; on cuda also conv+add+ReLU fusion)
        #[arg(long)]
        optimize: bool,
        /// Before writing, check what the graph computes against the model's eager forward on a
        /// fresh input and fail beyond the tolerance: on cpu the rewritten forward (needs
        /// --optimize; no GPU), on cuda the prepared graph
        #[arg(long)]
        check: bool,
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
        #[arg(long, allow_negative_numbers = true, default_value_t = 50)]
        warmup: usize,
        #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
        iters: usize,
        /// Load the model's weights from a .safetensors or .ot file (one model only)
        #[arg(long, value_name = "FILE")]
        weights: Option<PathBuf>,
        /// Also write the result record (JSON, with provenance) here
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// After the timing, measure each Nimble graph's floor: the critical path of its task
        /// graph by its ops' own kernel times (a profiled one-stream replay), which no stream
        /// assignment can beat, and Nimble's latency over it
        #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
        floor: bool,
        /// Also write each kernel-timed graph the floor was taken from here (MODEL.graph.json)
        #[arg(long, value_name = "DIR")]
        floor_graphs: Option<PathBuf>,
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
        #[arg(long, allow_negative_numbers = true, default_value_t = 20)]
        runs: usize,
        /// Kernel names listed, the largest total time first
        #[arg(long, allow_negative_numbers = true, default_value_t = 30)]
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
        backward_streams: torch_train::BackwardArg,
        #[arg(long, allow_negative_numbers = true, default_value_t = 50)]
        warmup: usize,
        #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
        iters: usize,
        /// Steps of the check against eager training before timing (0: none)
        #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
        check_steps: usize,
        /// Data parallel over NCCL: comma-separated GPU counts (e.g. 1,2). Measures the whole step
        /// (Nimble's streams) at each count with the per-GPU batch --batch, one process per GPU,
        /// and writes a scaling record; --mode and --check-steps do not apply (nimble-torch's
        /// data_parallel_gpu test checks N GPUs against one)
        #[arg(long, value_delimiter = ',')]
        gpus: Vec<usize>,
        #[command(flatten)]
        data_parallel: DataParallelArgs,
        /// Also write the result record (JSON, with provenance) here
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// GPUs: NCCL all-reduce times over a range of sizes on N GPUs (one process per GPU) and the
    /// ring model fitted to them (latency + 2(N−1)/N · bytes / bus bandwidth), which projects the
    /// cost to more GPUs; table plus a JSON record with provenance
    Allreduce {
        #[arg(long, allow_negative_numbers = true, default_value_t = 2)]
        gpus: usize,
        #[command(flatten)]
        sizes: AllReduceSizes,
        /// Also write the record (JSON, with provenance) here
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// One rank of `allreduce --gpus` (started by it)
    #[command(hide = true)]
    AllreduceRank {
        #[command(flatten)]
        sizes: AllReduceSizes,
        #[arg(long, value_name = "FILE")]
        rank_out: PathBuf,
    },
    /// One rank of `train --gpus` (started by it; see NIMBLE_RANK, NIMBLE_WORLD_SIZE,
    /// NIMBLE_LOCAL_RANK and NIMBLE_NCCL_ID in the README to start ranks on several hosts)
    #[command(hide = true)]
    TrainRank {
        #[arg(long)]
        model: String,
        #[arg(long, value_delimiter = ',')]
        batch: Vec<i64>,
        #[arg(long, default_value = "nimble")]
        algo: String,
        #[arg(long, allow_negative_numbers = true, default_value_t = 50)]
        warmup: usize,
        #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
        iters: usize,
        #[command(flatten)]
        data_parallel: DataParallelArgs,
        /// Where this rank's rows go (JSON)
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
}

/// What `allreduce` and each of its ranks measure.
#[derive(clap::Args, Debug)]
pub(crate) struct AllReduceSizes {
    /// Comma-separated buffer sizes, MiB
    #[arg(long, value_delimiter = ',', default_value = "0.0625,0.25,1,4,16,64,256")]
    sizes_mb: Vec<f64>,
    #[arg(long, allow_negative_numbers = true, default_value_t = 20)]
    warmup: usize,
    #[arg(long, allow_negative_numbers = true, default_value_t = 100)]
    iters: usize,
}

impl AllReduceSizes {
    fn args<'a>(&'a self, gpus: usize, out: Option<&'a std::path::Path>) -> allreduce::AllReduceArgs<'a> {
        allreduce::AllReduceArgs { gpus, sizes_mb: &self.sizes_mb, warmup: self.warmup, iterations: self.iters, out }
    }
}

/// What `train --gpus` and each of its ranks share.
#[derive(clap::Args, Debug)]
pub(crate) struct DataParallelArgs {
    /// Gradient bytes per all-reduce bucket, MiB (with --gpus)
    #[arg(long, allow_hyphen_values = true, default_value_t = 25.0)]
    bucket_mb: f64,
    /// Gradient bytes in the first bucket (the last layers'), MiB (with --gpus)
    #[arg(long, allow_hyphen_values = true, default_value_t = 1.0)]
    first_bucket_mb: f64,
    /// With --gpus: run the all-reduces on a stream of normal priority (default: high)
    #[arg(long)]
    comm_normal_priority: bool,
    /// With --gpus: gradients smaller than this (MiB) are copied into their bucket's one flat
    /// tensor and all-reduced together, larger ones all-reduced where they are (0: none copied;
    /// default: every gradient copied, as DDP)
    #[arg(long, allow_hyphen_values = true, value_name = "MIB")]
    pack_below_mb: Option<f64>,
    /// With --gpus 1: measure the one-GPU step as a data-parallel group of one rank (its graph
    /// holds the reducer's copies and NCCL calls, which move nothing between GPUs), to tell the
    /// reducer's own cost from communication's
    #[arg(long)]
    one_gpu_rank: bool,
    /// With --gpus: each rank then profiles a few steps, writes their Chrome traces to DIR, and
    /// the table shows NCCL's time per step and how much of it nothing else overlapped
    #[arg(long, value_name = "DIR")]
    profile: Option<PathBuf>,
    /// With --gpus: the one-GPU measurement writes each model's forward task graph (per-op times,
    /// the parameters each op reads) to DIR/<model>-b<batch>.json, from which `scaling
    /// --graphs DIR` simulates the step on more GPUs
    #[arg(long, value_name = "DIR")]
    graphs: Option<PathBuf>,
}

impl DataParallelArgs {
    fn scaling<'a>(&'a self, models: &'a str, batches: &'a [i64], gpus: &'a [usize], algorithm: &'a str, (warmup, iterations): (usize, usize), out: Option<&'a std::path::Path>) -> data_parallel::ScalingArgs<'a> {
        data_parallel::ScalingArgs {
            models,
            batches,
            gpus,
            algorithm,
            warmup,
            iterations,
            bucket_mb: self.bucket_mb,
            first_bucket_mb: self.first_bucket_mb,
            comm_normal_priority: self.comm_normal_priority,
            pack_below_mb: self.pack_below_mb,
            one_gpu_rank: self.one_gpu_rank,
            profile: self.profile.as_deref(),
            graphs: self.graphs.as_deref(),
            out,
        }
    }
}

/// `models --dataset` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum DatasetArg {
    Imagenet,
    Cifar10,
}

/// A TorchScript file in place of a zoo model (`infer`, `profile`, `export-graph`).
#[derive(clap::Args, Debug)]
pub(crate) struct ScriptArgs {
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
pub(crate) struct PrepareArgs {
    #[arg(long, allow_negative_numbers = true, default_value_t = 1)]
    batch: i64,
    /// The stream-assignment algorithm of the nimble mode
    #[arg(long, default_value = "nimble")]
    algo: String,
    /// With the rewrites: fuse convolution(+add)+ReLU into cuDNN's fused kernels (with
    /// --fuse-kernels, grouped ones are timed against Nimble's epilogue kernel and the faster kept)
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    fuse: bool,
    /// With the rewrites: Nimble's fused kernels for squeeze-and-excitation blocks and
    /// convolutions followed by SiLU, ReLU, ReLU6 or a residual add
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    fuse_kernels: bool,
    /// With the rewrites: channels-last (NHWC) weights and inputs; auto: on without grouped
    /// (depthwise) convolutions; with them, or when the first prepare took under 0.5 s, both
    /// layouts are prepared and timed and the faster kept
    #[arg(long, value_enum, default_value = "auto")]
    channels_last: torch::Switch,
    /// Check each graph against eager in exact float32 (TF32 convolutions off for both), then
    /// prepare it again with libtorch's defaults (TF32 convolutions) for timing; the timed
    /// graph's error is recorded, not judged. For deep networks with random weights, whose
    /// outputs TF32's rounding moves by more than the tolerance even in eager
    #[arg(long)]
    exact_check: bool,
    /// With the rewrites: freeze a model with many same-shaped constants on a CPU copy, its
    /// constants then put back on the GPU (faster to prepare; the GPU is used when that fails;
    /// the default); false: freeze on the GPU
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    freeze_on_host: bool,
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
            freeze_on_host: self.freeze_on_host,
        }
    }
}

/// `infer --mode` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub(crate) enum InferModeArg {
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

/// Runs one of the commands that need libtorch.
pub(crate) fn run(command: TorchCommand) -> anyhow::Result<()> {
    match command {
        TorchCommand::Models { dataset, trace, json } => {
            let dataset = match dataset {
                DatasetArg::Imagenet => Dataset::ImageNet,
                DatasetArg::Cifar10 => Dataset::Cifar10,
            };
            torch::list_models(dataset, trace, json)
        }
        TorchCommand::ExportGraph { model, script, batch, device, optimize, check, weights, out } => {
            let list = model.unwrap_or_default();
            torch::export_graph(script.models(&list, weights.as_deref())?, batch, device, optimize, check, out.as_ref())
        }
        TorchCommand::Infer { model, script, mode, optimize, prepare, warmup, iters, weights, out, floor, floor_graphs } => {
            let modes: Vec<InferMode> = mode.into_iter().map(InferMode::from).collect();
            torch::infer(&torch::InferArgs {
                models: script.models(&model, weights.as_deref())?,
                modes: &modes,
                optimize,
                config: prepare.config(warmup, iters),
                out: out.as_deref(),
                floor: floor || floor_graphs.is_some(),
                floor_graphs: floor_graphs.as_deref(),
            })
        }
        TorchCommand::Profile { model, script, mode, optimize, prepare, runs, top, trace, out } => torch_profile::profile(&torch_profile::ProfileArgs {
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
        TorchCommand::Train { model, batch, gpus, data_parallel, algo, warmup, iters, out, .. } if !gpus.is_empty() => {
            data_parallel::scaling_run(&data_parallel.scaling(&model, &batch, &gpus, &algo, (warmup, iters), out.as_deref()))
        }
        TorchCommand::Allreduce { gpus, sizes, out } => allreduce::allreduce(&sizes.args(gpus, out.as_deref())),
        TorchCommand::AllreduceRank { sizes, rank_out } => allreduce::rank_main(&sizes.args(0, None), &rank_out),
        TorchCommand::TrainRank { model, batch, algo, warmup, iters, data_parallel, out } => {
            data_parallel::rank_main(&data_parallel.scaling(&model, &batch, &[], &algo, (warmup, iters), Some(&out)))
        }
        TorchCommand::Train { model, batch, mode, algo, backward_streams, warmup, iters, check_steps, out, .. } => torch_train::train(&torch_train::TrainArgs {
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
    }
}

#[cfg(test)]
mod tests {
    /// `libtorch::COMMANDS`, which a build without libtorch uses to name the missing feature,
    /// lists exactly the commands defined here.
    #[test]
    fn the_list_of_libtorch_commands_is_this_enum() {
        use clap::Subcommand;
        let command = super::TorchCommand::augment_subcommands(clap::Command::new("nimble-bench"));
        let mut defined: Vec<String> = command.get_subcommands().map(|c| c.get_name().to_string()).collect();
        let mut listed: Vec<String> = crate::libtorch::COMMANDS.iter().map(|c| c.to_string()).collect();
        defined.sort();
        listed.sort();
        assert_eq!(defined, listed);
    }
}
