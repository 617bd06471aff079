//! What `prepare` is asked to do ([`PrepareOptions`]) and what it reports ([`PrepareReport`]):
//! plain data, read by every stage of the pipeline.

use nimble_cuda::CaptureMode;
use serde::Serialize;

use crate::ffi::Rewrites;

/// Which streams the backward of a training-prepared model runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BackwardStreams {
    /// Every backward op on one stream, as the paper did.
    One,
    /// Each backward op on its forward op's planned stream, as libtorch's autograd engine does by
    /// itself, with the engine's syncs between them. The default: on the H200 it made
    /// ResNet-50's whole training step 1.4–3.5% faster than one stream (batch 32–128,
    /// `paper-figs/results/training/training-resnet50-backward-streams.txt`), and it is the same plan on
    /// models whose forward has one stream.
    Forward,
}

/// What `prepare` does.
#[derive(Clone, Debug, PartialEq)]
pub struct PrepareOptions {
    /// The stream-assignment algorithm, by its nimble-sched registry name (`nimble`, `single`
    /// for the paper's single-stream Nimble, `round-robin:4`, …).
    pub algorithm: String,
    /// Apply the inference rewrites first: the forward is traced into TorchScript, frozen,
    /// BatchNorm folded into convolutions, `x * sigmoid(x)` made one SiLU, and on CUDA
    /// `fuse_conv_relu` and `channels_last` applied. The model's parameters must not require
    /// gradients (freeze its `VarStore`).
    pub optimize: bool,
    /// With `optimize` on CUDA: fuse convolution(+add)+ReLU into cuDNN's fused kernels (with
    /// `fuse_kernels`, each such grouped convolution is timed against Nimble's epilogue kernel
    /// the first time its shape is seen, and the faster kept: see [`ConvRelu`]).
    pub fuse_conv_relu: bool,
    /// With `optimize`: replace squeeze-and-excitation blocks (pool, 1×1 convolution, SiLU or
    /// ReLU, 1×1 convolution, sigmoid, scale) and convolutions followed by SiLU, ReLU, ReLU6 or
    /// a residual add with Nimble's fused ops (`nimble::squeeze_excite`,
    /// `nimble::conv2d_fused`), whose CUDA kernels do in one pass what ATen does in several;
    /// linear layers with theirs (GELU, ReLU, SiLU, a residual add) by `nimble::linear`, whose
    /// CUDA kernel times ATen's GEMM with its bias epilogue against a plain GEMM and one kernel
    /// for the rest the first time it sees a shape, and keeps the faster; attention masks go
    /// through `nimble::attention_mask`, which gives the fused attention kernels a mask they
    /// take (a boolean or expanded one sends attention to its math path, 13 kernels in BERT).
    /// In-place SiLU, ReLU6, sigmoid and GELU (torchvision's `inplace=True`) are made functional
    /// first, where nothing else sees the mutation, so that these patterns match them.
    pub fuse_kernels: bool,
    /// With `optimize` on CUDA: keep convolution weights and 4-D inputs channels-last (NHWC),
    /// so cuDNN needs no layout transforms (inductor's layout optimization does the same).
    /// `None` (the default) decides per model with convolutions: on unless it has grouped
    /// (depthwise) convolutions. Neither layout wins everywhere (on an H200 at batch 1, NHWC made
    /// AlexNet 21% and GoogLeNet 16% slower, MobileNetV2, EfficientNet-B5 and NASNet-A large
    /// 7–20% faster), so for a model with grouped convolutions, or one whose first prepare took
    /// under half a second, `prepare` also builds the other layout, times 60 replays of each,
    /// and keeps the faster (`PrepareReport::layout_trial`). Values are unchanged; outputs keep
    /// the layout the model gives them.
    pub channels_last: Option<bool>,
    /// With `optimize`, for a model on a GPU: freeze it on a CPU copy of itself and put its
    /// constants back on the GPU afterwards when that should be faster (the default), since
    /// PyTorch's freezing compares constants of one shape on the device they are on, a kernel
    /// and a host synchronization each (timm's NASNet-A large froze in 6.8 s on an H200, 1.45 s
    /// on the CPU), while the copy costs the model's bytes: taken when the pairs of same-shaped
    /// constants would cost twice the copy (the shim's `freeze.cpp`). When the copy cannot be
    /// frozen, or the forward it gives fails or synchronizes with the host, the model is frozen
    /// on the GPU instead (`PrepareReport::frozen_on_host` says which). False: always on the GPU.
    pub freeze_on_host: bool,
    /// With `optimize`, in a model whose parameters are float16 or bfloat16: fold BatchNorm into
    /// the convolutions' weights anyway (computed in float32, rounded once). Off by default:
    /// the folded weights round once more than eager and the compiler do, and on an H200
    /// (`72a88ee`) ResNet-50 in bfloat16 moved 0.127 from eager so against torch.compile's 0.084
    /// (GoogLeNet 0.134 against 0.021); on, it ran 0.39 ms instead of 0.90. PyTorch's other
    /// numeric foldings stay off in half precision either way.
    pub fold_half_precision: bool,
    /// How strictly CUDA polices other calls while capturing.
    pub capture_mode: CaptureMode,
    /// Turn on cuDNN's benchmark mode (algorithm search in the pre-run), as the paper measured.
    pub cudnn_benchmark: bool,
    /// Time each op on the GPU (one extra pass), for `task_graph`'s `duration_us`.
    pub measure_durations: bool,
    /// Prepare for training (`prepare` captures a forward and a backward graph behind a custom
    /// autograd function; `prepare_train_step` the whole step): the forward runs with
    /// `train = true` and gradients on.
    pub training: bool,
    /// With `training`: where the backward's ops run.
    pub backward_streams: BackwardStreams,
}

impl PrepareOptions {
    /// Inference with Nimble's defaults: the `nimble` algorithm, the inference rewrites,
    /// thread-local capture, cuDNN benchmark on, op durations measured.
    pub fn inference() -> Self {
        PrepareOptions {
            algorithm: "nimble".into(),
            optimize: true,
            fuse_conv_relu: true,
            fuse_kernels: true,
            channels_last: None,
            freeze_on_host: true,
            fold_half_precision: false,
            capture_mode: CaptureMode::ThreadLocal,
            cudnn_benchmark: true,
            measure_durations: true,
            training: false,
            backward_streams: BackwardStreams::One,
        }
    }

    /// Training with Nimble's defaults: the `nimble` algorithm for the forward, each backward op
    /// on its forward op's stream ([`BackwardStreams::Forward`]; the paper used one stream), no
    /// inference rewrites, thread-local capture, cuDNN benchmark on. Use with `prepare`
    /// (autograd mode) or `prepare_train_step` (whole step).
    pub fn training() -> Self {
        PrepareOptions { optimize: false, training: true, backward_streams: BackwardStreams::Forward, ..PrepareOptions::inference() }
    }

    /// Picks the streams of the backward (training).
    pub fn backward_streams(mut self, streams: BackwardStreams) -> Self {
        self.backward_streams = streams;
        self
    }

    /// Picks the stream-assignment algorithm by registry name.
    pub fn algorithm(mut self, name: impl Into<String>) -> Self {
        self.algorithm = name.into();
        self
    }

    /// Turns the inference rewrites on or off.
    pub fn optimize(mut self, on: bool) -> Self {
        self.optimize = on;
        self
    }

    /// Turns conv(+add)+ReLU fusion on or off (with `optimize`).
    pub fn fuse_conv_relu(mut self, on: bool) -> Self {
        self.fuse_conv_relu = on;
        self
    }

    /// Turns Nimble's fused kernels on or off (with `optimize`).
    pub fn fuse_kernels(mut self, on: bool) -> Self {
        self.fuse_kernels = on;
        self
    }

    pub(crate) fn rewrites(&self) -> Rewrites {
        Rewrites {
            fuse_conv_relu: self.fuse_conv_relu,
            fuse_kernels: self.fuse_kernels,
            channels_last: self.channels_last,
            freeze_on_host: self.freeze_on_host,
            fold_half_precision: self.fold_half_precision,
        }
    }

    /// Forces the channels-last layout on or off (with `optimize`), or (`None`) lets the model
    /// decide.
    pub fn channels_last(mut self, on: Option<bool>) -> Self {
        self.channels_last = on;
        self
    }

    /// Freezes a model on a GPU on a CPU copy first when that should be faster (the default), or
    /// only on the GPU (with `optimize`).
    pub fn freeze_on_host(mut self, on: bool) -> Self {
        self.freeze_on_host = on;
        self
    }

    /// Folds BatchNorm into the convolutions in a float16 or bfloat16 model too, for speed at
    /// some distance from eager (see the field).
    pub fn fold_half_precision(mut self, on: bool) -> Self {
        self.fold_half_precision = on;
        self
    }

    /// Picks the capture mode.
    pub fn capture_mode(mut self, mode: CaptureMode) -> Self {
        self.capture_mode = mode;
        self
    }

    /// Turns the per-op timing pass on or off.
    pub fn measure_durations(mut self, on: bool) -> Self {
        self.measure_durations = on;
        self
    }
}

/// What `prepare` found and built.
#[derive(Clone, Debug, Serialize)]
pub struct PrepareReport {
    /// `inference`, `autograd` (forward and backward graphs behind autograd) or `step` (the
    /// whole training step as one graph).
    pub mode: &'static str,
    pub algorithm: String,
    pub optimized: bool,
    /// The channels-last layout was applied.
    pub channels_last: bool,
    /// Nimble's fused ops in the optimized forward (`PrepareOptions::fuse_kernels`).
    pub fused_ops: usize,
    /// Copies to the GPU of values the host computes from constants and the inputs' shapes
    /// alone, folded into constants (inference; a TorchScript forward). The prepared forward, and
    /// `Nimble::eager` after it, then take only inputs of the prepared shapes.
    pub host_values_folded: usize,
    /// The rewrites froze the module on a CPU copy, its constants then put on the GPU (the
    /// shim's `freeze.cpp`: PyTorch's freezing synchronizes with the host per pair of constants
    /// it compares on a GPU); false when it was frozen on the GPU (too few such pairs to repay
    /// the copy, or the copy failed, or its forward did or synchronized with the host) or nothing
    /// was frozen (`optimize(false)`).
    pub frozen_on_host: bool,
    /// Top-level ops of one forward.
    pub ops: usize,
    /// Ops in the task graph (see `Trace::task_ops`: views and CPU-only ops are left out).
    pub tasks: usize,
    pub edges: usize,
    pub streams: usize,
    pub syncs: usize,
    /// Nodes of the captured CUDA graph, all kinds, and kernel nodes among them.
    pub graph_nodes: usize,
    pub kernel_nodes: usize,
    /// Largest set of captured nodes no dependency path joins.
    pub graph_width: usize,
    /// Kernel nodes of the backward graph (autograd mode; 0 otherwise).
    pub backward_kernel_nodes: usize,
    /// Gradient all-reduces per step of a data-parallel whole step (0 otherwise).
    pub gradient_buckets: usize,
    /// When the layout was chosen by timing both (see `PrepareOptions::channels_last`).
    pub layout_trial: Option<LayoutTrial>,
    /// Wall-clock seconds per step, and in all.
    pub seconds: PrepareSeconds,
}

/// The two layouts' replay times, median microseconds, from which `prepare` chose.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct LayoutTrial {
    pub nchw_us: f64,
    pub nhwc_us: f64,
}


/// Wall-clock seconds of each step of `prepare`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PrepareSeconds {
    pub optimize: f64,
    pub warmup: f64,
    pub trace: f64,
    pub schedule: f64,
    pub time_ops: f64,
    pub prerun: f64,
    pub capture: f64,
    /// Preparing the other layout and timing both (`layout_trial`); 0 without a trial.
    pub layout_trial: f64,
    pub total: f64,
}

/// How the inference rewrites' linear layers (`nimble::linear`) compute on CUDA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinearGemm {
    /// The faster of the two ways below, timed the first time each shape (rows, features,
    /// dtype, epilogue) is seen outside a capture and remembered for the process, as cuDNN's
    /// benchmark mode does for convolutions.
    #[default]
    Timed,
    /// ATen's linear (cuBLASLt with its bias epilogue), then the residual and the activation.
    Aten,
    /// The product alone through cuBLAS's plain GEMM, then one kernel for bias, residual and
    /// activation (float32; other dtypes take ATen's ops for them).
    Plain,
}

/// How the inference rewrites' grouped convolutions followed by a ReLU (with a residual added
/// before it or not) compute on CUDA, where both `fuse_conv_relu` and `fuse_kernels` are on
/// (`nimble::conv2d_relu`; the others are always cuDNN's fused kernels: timing one costs prepare
/// a second cuDNN algorithm search).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvRelu {
    /// The faster of the two ways below, timed the first time each case (shapes, layouts,
    /// convolution parameters, cuDNN settings) is seen outside a capture and remembered for the
    /// process.
    #[default]
    Timed,
    /// cuDNN's fused convolution(+add)+ReLU kernels.
    Cudnn,
    /// cuDNN's convolution without the bias, then one kernel for bias, residual and ReLU
    /// (`nimble::conv2d_fused`'s way; float32, other dtypes take ATen's ops for them).
    Epilogue,
}

/// Sets how `nimble::conv2d_relu` computes on CUDA for the whole process, from the next call on
/// (graphs already captured keep their kernels). For ablations and tests; [`ConvRelu::Timed`] is
/// the default.
pub fn set_conv_relu(way: ConvRelu) -> crate::Result<()> {
    crate::ffi::set_conv_relu(way)
}

/// Sets how `nimble::linear` computes on CUDA for the whole process, from the next call on
/// (graphs already captured keep their kernels). For ablations and tests; [`LinearGemm::Timed`]
/// is the default.
pub fn set_linear_gemm(gemm: LinearGemm) -> crate::Result<()> {
    crate::ffi::set_linear_gemm(gemm)
}
