//! GPU tests of training: the autograd mode (`prepare` with `PrepareOptions::training`) and the
//! whole-step mode (`prepare_train_step`) against eager tch training from the same weights and
//! data; BatchNorm statistics and dropout on replay; the errors. Without a CUDA device each test
//! prints a notice and passes; with `NIMBLE_REQUIRE_GPU=1` it fails instead.


use nimble_torch::{relative_error, BackwardStreams, Nimble, NimbleError, Optimizer, PrepareOptions, TrainStep};
use tch::nn::{self, ModuleT, OptimizerConfig};
use tch::{Device, Kind, Tensor};

mod common;
use common::gpu;
use common::net::Net;

const CUDA: Device = Device::Cuda(0);
const BATCH: i64 = 16;
const STEPS: usize = 20;
/// Largest relative difference (max |a − b| / max |b|) of any variable after `STEPS` steps:
/// float32 with TF32 convolutions and cuDNN's non-deterministic backward reductions, whose
/// rounding differences compound over the steps (seen: 2e-6 to 2e-3, largest on small
/// BatchNorm biases).
const TOLERANCE: f64 = 5e-3;

/// Two copies of one randomly initialized network: (variables, network) each.
fn twins(dropout: f64) -> ((nn::VarStore, Net), (nn::VarStore, Net)) {
    tch::manual_seed(0);
    let vs_a = nn::VarStore::new(CUDA);
    let a = Net::new(&vs_a.root(), dropout);
    let mut vs_b = nn::VarStore::new(CUDA);
    let b = Net::new(&vs_b.root(), dropout);
    vs_b.copy(&vs_a).unwrap();
    ((vs_a, a), (vs_b, b))
}

fn batches() -> Vec<(Tensor, Tensor)> {
    (0..STEPS).map(|_| (Tensor::randn([BATCH, 3, 32, 32], (Kind::Float, CUDA)), Tensor::randint(10, [BATCH], (Kind::Int64, CUDA)))).collect()
}

fn sgd() -> nn::Sgd {
    nn::Sgd { momentum: 0.9, dampening: 0.0, wd: 5e-4, nesterov: false }
}

/// Eager tch training: the reference. Returns the loss of each step.
fn train_eager(vs: &nn::VarStore, net: &Net, data: &[(Tensor, Tensor)], config: impl OptimizerConfig, lr: f64) -> Vec<f64> {
    let mut opt = config.build(vs, lr).unwrap();
    data.iter()
        .map(|(x, y)| {
            let loss = net.forward_t(x, true).cross_entropy_for_logits(y);
            opt.backward_step(&loss);
            loss.double_value(&[])
        })
        .collect()
}

/// The largest relative difference between the two stores' variables (parameters and buffers).
fn worst_difference(a: &nn::VarStore, b: &nn::VarStore) -> (f64, String) {
    let vb = b.variables();
    let mut worst = (0.0, String::new());
    for (name, va) in a.variables() {
        let error = relative_error(&vb[&name], &va);
        if error.is_nan() || error > worst.0 {
            worst = (error, name);
        }
    }
    worst
}

fn assert_close(what: &str, losses: &[f64], reference: &[f64], a: &nn::VarStore, b: &nn::VarStore) {
    let loss_error = losses.iter().zip(reference).map(|(l, r)| (l - r).abs() / r.abs().max(1e-12)).fold(0.0, f64::max);
    let (error, name) = worst_difference(a, b);
    eprintln!("{what}: after {STEPS} steps, largest variable difference {error:.2e} ({name}), loss difference {loss_error:.2e}; losses {:.4} → {:.4}", reference[0], reference[STEPS - 1]);
    assert!(error <= TOLERANCE, "{what}: variable {name} differs from eager training by {error:.2e}");
    assert!(loss_error <= TOLERANCE, "{what}: losses differ from eager training by {loss_error:.2e}");
    assert!(reference[STEPS - 1] < reference[0], "{what}: eager training did not lower the loss, so the test proves little");
}

#[test]
fn autograd_mode_trains_like_eager_tch_with_either_backward_streams() {
    let Some(_gpu) = gpu() else { return };
    for streams in [BackwardStreams::One, BackwardStreams::Forward] {
        let ((vs_a, a), (vs_b, b)) = twins(0.0);
        let data = batches();
        let reference = train_eager(&vs_a, &a, &data, sgd(), 0.05);
        let mut nimble = Nimble::new(b);
        let report = nimble.prepare(&[data[0].0.copy()], PrepareOptions::training().backward_streams(streams)).unwrap().clone();
        assert_eq!(report.mode, "autograd");
        assert!(report.streams >= 2, "the two branches should get two streams: {report:?}");
        assert!(report.backward_kernel_nodes > report.kernel_nodes, "{report:?}");
        let mut opt = sgd().build(&vs_b, 0.05).unwrap();
        let losses: Vec<f64> = data
            .iter()
            .map(|(x, y)| {
                let out = nimble.forward(std::slice::from_ref(x)).unwrap().remove(0);
                assert!(out.requires_grad());
                let loss = out.cross_entropy_for_logits(y);
                opt.zero_grad();
                loss.backward();
                opt.step();
                loss.double_value(&[])
            })
            .collect();
        assert_close(&format!("autograd mode, backward {streams:?}"), &losses, &reference, &vs_a, &vs_b);
    }
}

#[test]
fn train_step_trains_like_eager_tch_with_sgd_and_adam() {
    let Some(_gpu) = gpu() else { return };
    for (algorithm, optimizer) in [
        ("nimble", Optimizer::sgd(0.05).momentum(0.9).weight_decay(5e-4)),
        ("single", Optimizer::sgd(0.05).momentum(0.9).weight_decay(5e-4)),
        ("nimble", Optimizer::adam(1e-3)),
    ] {
        let ((vs_a, a), (vs_b, b)) = twins(0.0);
        let data = batches();
        let reference = match optimizer {
            Optimizer::Adam { .. } => train_eager(&vs_a, &a, &data, nn::Adam::default(), 1e-3),
            _ => train_eager(&vs_a, &a, &data, sgd(), 0.05),
        };
        let mut nimble = Nimble::new(b);
        let options = PrepareOptions::training().algorithm(algorithm);
        let report = nimble.prepare_train_step(&[data[0].0.copy()], &data[0].1, options, TrainStep::new(optimizer.clone())).unwrap().clone();
        assert_eq!(report.mode, "step");
        let losses: Vec<f64> = data.iter().map(|(x, y)| nimble.train_step(std::slice::from_ref(x), y).unwrap().double_value(&[])).collect();
        assert_close(&format!("train_step, {algorithm}, {optimizer:?}"), &losses, &reference, &vs_a, &vs_b);
    }
}

#[test]
fn dropout_draws_fresh_masks_and_batch_norm_statistics_update_on_every_replay() {
    let Some(_gpu) = gpu() else { return };
    tch::manual_seed(1);
    let vs = nn::VarStore::new(CUDA);
    let net = Net::new(&vs.root(), 0.5);
    let mean = |vs: &nn::VarStore| vs.variables()["stem_bn.running_mean"].copy();
    let before = mean(&vs);
    let x = Tensor::randn([BATCH, 3, 32, 32], (Kind::Float, CUDA));
    let mut nimble = Nimble::new(net);
    nimble.prepare(&[x.copy()], PrepareOptions::training()).unwrap();
    assert!(relative_error(&mean(&vs), &before) == 0.0, "prepare must leave the running statistics as they were");
    let first = nimble.forward(std::slice::from_ref(&x)).unwrap().remove(0).detach().copy();
    let after_one = mean(&vs);
    assert!(relative_error(&after_one, &before) > 1e-4, "a replay must update the running mean");
    let second = nimble.forward(std::slice::from_ref(&x)).unwrap().remove(0).detach().copy();
    assert!(relative_error(&mean(&vs), &after_one) > 1e-5, "every replay must update the running mean");
    let dropout_differs = relative_error(&second, &first);
    eprintln!("same input, two replays: outputs differ by {dropout_differs:.2e} (dropout 0.5)");
    assert!(dropout_differs > 1e-3, "dropout must draw a fresh mask on every replay");
}

#[test]
fn training_with_dropout_follows_the_same_random_stream_as_eager() {
    let Some(_gpu) = gpu() else { return };
    let ((vs_a, a), (vs_b, b)) = twins(0.3);
    let data = batches();
    let mut nimble = Nimble::new(b);
    let options = PrepareOptions::training();
    nimble.prepare_train_step(&[data[0].0.copy()], &data[0].1, options, TrainStep::new(Optimizer::sgd(0.05).momentum(0.9).weight_decay(5e-4))).unwrap();
    // The graph's random draws continue the generator from where it is at each replay, as
    // eager draws do: seeded alike, both see the same masks.
    tch::manual_seed(7);
    let reference = train_eager(&vs_a, &a, &data, sgd(), 0.05);
    tch::manual_seed(7);
    let losses: Vec<f64> = data.iter().map(|(x, y)| nimble.train_step(std::slice::from_ref(x), y).unwrap().double_value(&[])).collect();
    assert_close("train_step with dropout", &losses, &reference, &vs_a, &vs_b);
}

#[test]
fn training_misuse_gives_clear_errors() {
    let Some(_gpu) = gpu() else { return };
    let ((_vs, net), _) = twins(0.0);
    let x = Tensor::randn([BATCH, 3, 32, 32], (Kind::Float, CUDA));
    let mut nimble = Nimble::new(net);
    nimble.prepare(&[x.copy()], PrepareOptions::training()).unwrap();

    let err = tch::no_grad(|| nimble.forward(std::slice::from_ref(&x))).unwrap_err();
    assert!(matches!(err, NimbleError::Training(_)) && err.to_string().contains("gradients off"), "{err}");

    let out = nimble.forward(std::slice::from_ref(&x)).unwrap().remove(0);
    out.sum(Kind::Float).backward();
    let err = out.sum(Kind::Float).f_backward().unwrap_err().to_string();
    assert!(err.contains("backward ran twice"), "{err}");

    let old = nimble.forward(std::slice::from_ref(&x)).unwrap().remove(0);
    let _new = nimble.forward(std::slice::from_ref(&x)).unwrap();
    let err = old.sum(Kind::Float).f_backward().unwrap_err().to_string();
    assert!(err.contains("earlier forward"), "{err}");

    let err = nimble.forward(&[Tensor::randn([BATCH + 1, 3, 32, 32], (Kind::Float, CUDA))]).unwrap_err();
    assert!(matches!(err, NimbleError::InputMismatch { what: "the shape", .. }), "{err}");

    let err = nimble.train_step(std::slice::from_ref(&x), &Tensor::zeros([BATCH], (Kind::Int64, CUDA))).unwrap_err();
    assert!(matches!(err, NimbleError::Training(_)), "{err}");

    // A stale output whose Nimble was prepared again refuses its backward.
    let stale = nimble.forward(std::slice::from_ref(&x)).unwrap().remove(0);
    nimble.prepare(&[x.copy()], PrepareOptions::training()).unwrap();
    let err = stale.sum(Kind::Float).f_backward().unwrap_err().to_string();
    assert!(err.contains("dropped or prepared again"), "{err}");

    // A frozen model has nothing to train.
    let mut vs = nn::VarStore::new(CUDA);
    let frozen = Net::new(&vs.root(), 0.0);
    vs.freeze();
    let err = Nimble::new(frozen).prepare(&[x.copy()], PrepareOptions::training()).unwrap_err();
    assert!(err.to_string().contains("nothing to train"), "{err}");
}
