//! What the test binaries share: one lock around the GPU and the skip-or-fail rule, and a model
//! for the fused kernels. Each binary uses some of it.
#![allow(dead_code)]

use std::sync::Mutex;

pub mod net;

/// The tests share one GPU and its allocator statistics; capture in global mode also forbids
/// other threads' allocations. So they run one at a time.
static GPU: Mutex<()> = Mutex::new(());

/// The GPU, locked, with cuDNN's benchmark mode on; `None` (after a notice) without a CUDA
/// device, unless `NIMBLE_REQUIRE_GPU=1`, which makes a missing device a failure.
pub fn gpu() -> Option<std::sync::MutexGuard<'static, ()>> {
    if nimble_torch::cuda_available() {
        let guard = GPU.lock().unwrap_or_else(|e| e.into_inner());
        tch::Cuda::cudnn_set_benchmark(true);
        return Some(guard);
    }
    if std::env::var("NIMBLE_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("NIMBLE_REQUIRE_GPU=1 but libtorch sees no CUDA device");
    }
    eprintln!("notice: no CUDA device; skipping this GPU test (set NIMBLE_REQUIRE_GPU=1 to fail instead)");
    None
}

/// A forward with each pattern Nimble's fused kernels take and two they must leave alone, with
/// random weights on `device`. Its inputs come from [`fusable_inputs`]. The rewrites make it one
/// `nimble::squeeze_excite`, three `nimble::conv2d_fused` and two plain convolutions.
pub fn fusable_forward(device: tch::Device) -> impl Fn(&[tch::Tensor]) -> Vec<tch::Tensor> + 'static {
    use tch::{Kind, Tensor};
    tch::manual_seed(3);
    let opts = (Kind::Float, device);
    // Weights scaled by 1/sqrt(fan-in), so that every output is of order 1.
    let weights = |shape: [i64; 4]| Tensor::randn(shape, opts) / ((shape[1] * shape[2] * shape[3]) as f64).sqrt();
    // Five convolutions with their own weights (identical ones would be merged into one).
    let convs: Vec<(Tensor, Tensor)> = (0..5).map(|_| (weights([8, 4, 3, 3]), Tensor::randn([8], opts))).collect();
    let (w1, b1, w2, b2) = (weights([2, 8, 1, 1]), Tensor::randn([2], opts), weights([8, 2, 1, 1]), Tensor::randn([8], opts));
    move |xs: &[Tensor]| {
        let conv = |i: usize| xs[0].conv2d(&convs[i].0, Some(&convs[i].1), [1, 1], [1, 1], [1, 1], 1);
        // Fused: ReLU6; squeeze-and-excitation with ReLU; residuals of the output's shape and
        // broadcast ones (a constant one would be folded into the bias instead).
        let relu6 = conv(0).relu6();
        let gate = relu6.adaptive_avg_pool2d([1, 1]).conv2d(&w1, Some(&b1), [1, 1], [0, 0], [1, 1], 1).relu();
        let gate = gate.conv2d(&w2, Some(&b2), [1, 1], [0, 0], [1, 1], 1).sigmoid();
        let excited = gate * &relu6;
        let broadcast = conv(1) + &xs[1];
        let residual = &xs[2] + conv(4);
        // Not fused: a convolution whose output is also returned; a clamp that is not ReLU6.
        let shared = conv(2);
        let clamped = conv(3).hardtanh();
        vec![excited, broadcast, residual, shared.silu(), shared, clamped]
    }
}

/// Inputs for [`fusable_forward`]: x (`batch` × 4 × `h` × `w`, channels-last if asked), a
/// residual that broadcasts and one of the convolutions' output shape.
pub fn fusable_inputs(batch: i64, h: i64, w: i64, device: tch::Device, channels_last: bool) -> Vec<tch::Tensor> {
    use tch::{Kind, Tensor};
    let opts = (Kind::Float, device);
    let mut x = Tensor::randn([batch, 4, h, w], opts);
    if channels_last {
        x = x.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2]);
    }
    vec![x, Tensor::randn([batch, 8, 1, 1], opts), Tensor::randn([batch, 8, h, w], opts)]
}

/// The directory holding the TorchScript modules of `tests/fixtures/make_modules.py`, made once
/// per test binary with the Python named by `NIMBLE_PYTHON` (PyTorch 2.11.0: `.cargo/config.toml`
/// points it at the venv `scripts/setup-libtorch.sh` makes; on the GPU machine, its Python).
pub fn torchscript_fixtures() -> &'static std::path::Path {
    use std::path::PathBuf;
    use std::sync::OnceLock;
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let python = std::env::var("NIMBLE_PYTHON").expect(
            "NIMBLE_PYTHON must name a Python with torch 2.11.0 to make the TorchScript fixtures (cargo sets it from .cargo/config.toml after scripts/setup-libtorch.sh)",
        );
        let dir = std::env::temp_dir().join(format!("nimble-torch-fixtures-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/make_modules.py");
        let script = if script.exists() { script } else { PathBuf::from("nimble-torch/tests/fixtures/make_modules.py") };
        let output = std::process::Command::new(&python).arg(&script).arg(&dir).output().unwrap_or_else(|e| panic!("running {python}: {e}"));
        assert!(output.status.success(), "{python} {} failed: {}", script.display(), String::from_utf8_lossy(&output.stderr));
        dir
    })
}
