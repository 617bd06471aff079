//! Tracing and planning on CPU tensors (what CI can run): op and edge counts of tch::vision
//! models, in-place and view handling, the static-model check, host-sync detection, the
//! inference rewrites, TorchScript files, training's checks, the fused optimizer and kernels, and
//! the errors a GPU-less machine gives. TorchScript modules' own tests: `cpu_torchscript.rs`.

use std::cell::Cell;

use nimble_sched::{algorithms, verify, Analysis};
use nimble_torch::{FusedOptimizer, Nimble, NimbleError, Optimizer, PrepareOptions, Trace, TrainStep};
use tch::{nn, Device, Kind, Tensor};

mod common;

fn input(shape: &[i64]) -> Tensor {
    tch::manual_seed(0);
    Tensor::randn(shape, (Kind::Float, Device::Cpu))
}

fn count(trace: &Trace, name: &str) -> usize {
    trace.ops.iter().filter(|op| op.name == name).count()
}

/// A model built on the CPU with its VarStore frozen (as the inference rewrites need). Keep the
/// VarStore while the model is used.
fn frozen<M>(build: impl FnOnce(&nn::Path) -> M) -> (nn::VarStore, M) {
    let mut vs = nn::VarStore::new(Device::Cpu);
    let model = build(&vs.root());
    vs.freeze();
    (vs, model)
}

fn resnet50(frozen: bool) -> (nn::VarStore, Nimble) {
    let mut vs = nn::VarStore::new(Device::Cpu);
    let model = tch::vision::resnet::resnet50(&vs.root(), 1000);
    if frozen {
        vs.freeze();
    }
    (vs, Nimble::new(model))
}

#[test]
fn resnet50_trace_has_one_node_per_layer_op_and_the_residual_structure() {
    let (_vs, nimble) = resnet50(false);
    let trace = nimble.trace(&[input(&[1, 3, 224, 224])], false).unwrap();
    // 53 convolutions each followed by a BatchNorm, 16 residual adds, ReLUs after the stem, after
    // the first two convs of each of the 16 bottlenecks and after each add: 1 + 32 + 16 = 49.
    assert_eq!(count(&trace, "aten::conv2d"), 53);
    assert_eq!(count(&trace, "aten::batch_norm"), 53);
    assert_eq!(count(&trace, "aten::relu_") + count(&trace, "aten::relu"), 49);
    assert_eq!(count(&trace, "aten::add") + count(&trace, "aten::add_"), 16);
    assert_eq!(trace.len(), 175, "{:?}", trace.op_histogram());
    let graph = trace.task_graph().unwrap();
    assert_eq!(graph.len(), 174, "every op but the flatten, a view with no GPU work");
    // Every op but the first consumes the one before it or a residual; the four projection
    // shortcuts (conv + BN beside the main path) are the only parallelism.
    assert_eq!(Analysis::new(&graph).width(), 2);
    assert_eq!(graph.edge_count(), 173 + 16, "a chain plus one skip edge per residual add");
}

#[test]
fn vision_models_trace_to_graphs_nimble_schedules_with_full_concurrency() {
    tch::manual_seed(0);
    let vs = nn::VarStore::new(Device::Cpu);
    let cases: Vec<(&str, Nimble, i64, usize, usize)> = vec![
        // (name, model, input size, conv2d count, width): widths from the architectures —
        // Inception-v3's widest block (E) runs 6 branches at once; MobileNetV2 is a chain whose
        // residual adds skip ahead, so no two of its tasks are independent.
        ("inception-v3", Nimble::new(tch::vision::inception::v3(&(vs.root() / "inc"), 1000)), 299, 94, 6),
        ("mobilenet-v2", Nimble::new(tch::vision::mobilenet::v2(&(vs.root() / "mb"), 1000)), 224, 52, 1),
    ];
    for (name, nimble, size, convs, width) in cases {
        let trace = nimble.trace(&[input(&[1, 3, size, size])], false).unwrap();
        assert_eq!(count(&trace, "aten::conv2d"), convs, "{name}: {:?}", trace.op_histogram());
        let graph = trace.task_graph().unwrap();
        let analysis = Analysis::new(&graph);
        assert_eq!(analysis.width(), width, "{name}");
        let plan = algorithms::by_name("nimble").unwrap().assign(&analysis);
        let check = verify(&analysis, &plan);
        assert!(check.violations.is_empty(), "{name}: {:?}", check.violations);
        assert!(check.max_logical_concurrency, "{name}: Nimble keeps every independent pair on different streams");
        assert!(plan.streams >= width, "{name}");
    }
}

#[test]
fn in_place_ops_and_views_are_ordered_after_earlier_readers() {
    let nimble = Nimble::from_fn(|xs: &[Tensor]| {
        let a = xs[0].relu(); // 0
        let v = a.view([-1]); // 1: a view of a
        let s = a.sigmoid(); // 2: reads a
        let mut w = v.shallow_clone();
        let _ = w.relu_(); // 3: writes a's storage through the view
        let t = a.tanh(); // 4: must see the in-place result
        vec![s, t]
    });
    let trace = nimble.trace(&[input(&[4, 4])], false).unwrap();
    let names: Vec<&str> = trace.ops.iter().map(|op| op.name.as_str()).collect();
    assert_eq!(names, ["aten::relu", "aten::view", "aten::sigmoid", "aten::relu_", "aten::tanh"]);
    assert!(trace.ops[3].inputs[0].write, "the schema marks relu_'s self as written");
    let deps = trace.dependencies();
    assert_eq!(deps[2], vec![0], "sigmoid needs relu's result only, not the view");
    assert_eq!(deps[3], vec![0, 1, 2], "relu_ waits for the writer and every reader since");
    assert_eq!(deps[4], vec![3], "tanh reads what relu_ wrote");
}

#[test]
fn a_model_whose_op_sequence_changes_is_refused_naming_the_first_differing_op() {
    let calls = Cell::new(0);
    let nimble = Nimble::from_fn(move |xs: &[Tensor]| {
        calls.set(calls.get() + 1);
        let x = xs[0].relu();
        // Data-dependent control flow, as far as tracing can tell: odd calls take another path.
        vec![if calls.get() % 2 == 1 { x.sigmoid() } else { x.tanh() }]
    });
    let error = nimble.trace(&[input(&[2, 2])], false).unwrap_err();
    assert!(matches!(error, NimbleError::OpMismatch { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains("op #1") && message.contains("aten::sigmoid") && message.contains("aten::tanh"), "{message}");
}

#[test]
fn reading_cpu_tensors_on_the_host_is_no_host_sync() {
    // `nonzero` and `.item()` make the host wait only for the device: on CPU tensors they are
    // plain host work (the GPU tests check that on CUDA tensors they are refused).
    let nimble = Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].nonzero(), &xs[0] * xs[0].sum(Kind::Float).double_value(&[])]);
    let trace = nimble.trace(&[input(&[8])], false).unwrap();
    assert!(count(&trace, "aten::nonzero") == 1 && count(&trace, "aten::item") == 1, "{:?}", trace.op_histogram());
    assert!(trace.first_host_sync().is_none(), "{:?}", trace.ops);
}

#[test]
fn the_inference_rewrites_fold_batchnorm_and_need_frozen_parameters() {
    let (_vs, nimble) = resnet50(false);
    let error = nimble.trace(&[input(&[1, 3, 224, 224])], true).unwrap_err();
    assert!(error.to_string().contains("freeze()"), "{error}");

    let (_vs, nimble) = resnet50(true);
    let trace = nimble.trace(&[input(&[1, 3, 224, 224])], true).unwrap();
    assert_eq!(count(&trace, "aten::batch_norm"), 0, "{:?}", trace.op_histogram());
    // Each convolution has its ReLU or residual add fused, but in the 4 downsampling blocks: their
    // add sums two parallel branches (the last convolution and the downsampling one), and fusing
    // it would make one branch wait for the other.
    assert_eq!((count(&trace, "aten::conv2d"), count(&trace, "nimble::conv2d_fused"), count(&trace, "aten::add")), (8, 45, 4), "{:?}", trace.op_histogram());
    assert!(trace.len() < 130, "{}", trace.len());
}

#[test]
fn torchscript_files_are_accepted() {
    let (_vs, model) = frozen(|p| tch::vision::mobilenet::v2(p, 10));
    let x = input(&[1, 3, 64, 64]);
    let mut forward = |xs: &[Tensor]| vec![nn::ModuleT::forward_t(&model, &xs[0], false)];
    let module = tch::CModule::create_by_tracing("M", "forward", &[x.shallow_clone()], &mut forward).unwrap();
    let dir = std::env::temp_dir().join(format!("nimble-torch-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("mobilenet.pt");
    module.save(&path).unwrap();
    let nimble = Nimble::from_torchscript(&path, Device::Cpu).unwrap();
    let trace = nimble.trace(&[x.shallow_clone()], false).unwrap();
    assert!(count(&trace, "aten::_convolution") + count(&trace, "aten::conv2d") == 52, "{:?}", trace.op_histogram());
    // The TorchScript interpreter calls ops boxed, with its whole stack in view: the recorder
    // must still see each op's own arguments, or false dependencies would appear.
    let eager_trace = nimble_torch::record(|| forward(&[x.shallow_clone()])).unwrap().0;
    let (jit_graph, eager_graph) = (trace.task_graph().unwrap(), eager_trace.task_graph().unwrap());
    assert_eq!((jit_graph.len(), jit_graph.edge_count()), (eager_graph.len(), eager_graph.edge_count()));
    let reference = forward(&[x.shallow_clone()]).remove(0);
    let out = nimble.eager(&[x]).unwrap().remove(0);
    assert_eq!((out - reference).abs().max().double_value(&[]), 0.0);
    std::fs::remove_dir_all(&dir).unwrap();
    let missing = Nimble::from_torchscript(dir.join("missing.pt"), Device::Cpu).err().expect("no such file");
    assert!(missing.to_string().contains("missing.pt"), "{missing}");
}

#[test]
fn without_a_gpu_prepare_says_so_and_forward_needs_prepare() {
    let (_vs, mut nimble) = resnet50(true);
    let x = input(&[1, 3, 64, 64]);
    assert!(matches!(nimble.forward(&[x.shallow_clone()]), Err(NimbleError::NotPrepared)));
    assert!(matches!(nimble.trace(&[], false), Err(NimbleError::InvalidInput(_))));
    if nimble_torch::cuda_available() {
        eprintln!("note: a CUDA device is present; the no-GPU error is not exercised here");
        return;
    }
    let error = nimble.prepare(&[x], PrepareOptions::inference()).unwrap_err();
    assert!(matches!(error, NimbleError::NoCuda), "{error}");
}

#[test]
fn a_failing_forward_is_an_error_not_a_crash() {
    let nimble = Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].matmul(&xs[0])]);
    let error = nimble.trace(&[input(&[2, 3])], false).unwrap_err();
    assert!(matches!(error, NimbleError::ForwardFailed { .. }), "{error}");
    // The recorder was stopped: tracing works again afterwards.
    let ok = Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].relu()]).trace(&[input(&[2, 3])], false).unwrap();
    assert_eq!(ok.len(), 1);
}

#[test]
fn the_inference_rewrites_turn_swish_into_silu() {
    let nimble = Nimble::from_fn(|xs: &[Tensor]| vec![&xs[0] * xs[0].sigmoid(), xs[0].tanh()]);
    let x = input(&[4, 4]);
    let trace = nimble.trace(&[x.shallow_clone()], true).unwrap();
    let names: Vec<&str> = trace.ops.iter().map(|op| op.name.as_str()).collect();
    assert_eq!(count(&trace, "aten::silu"), 1, "{names:?}");
    assert_eq!(count(&trace, "aten::sigmoid") + count(&trace, "aten::mul"), 0, "{names:?}");
    assert_eq!(count(&trace, "aten::tanh"), 1, "several outputs are returned as a tuple: {names:?}");
    let out = nimble.eager(&[x.shallow_clone()]).unwrap();
    assert_eq!(out.len(), 2);
    assert!((&out[0] - x.silu()).abs().max().double_value(&[]) < 1e-6);
    assert!((&out[1] - x.tanh()).abs().max().double_value(&[]) < 1e-6);
}

#[test]
fn training_needs_cuda_and_checks_its_optimizer_first() {
    let vs = nn::VarStore::new(Device::Cpu);
    let model = tch::vision::resnet::resnet18(&vs.root(), 10);
    let x = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
    let y = Tensor::zeros([2], (Kind::Int64, Device::Cpu));
    let mut nimble = Nimble::new(model);
    if !nimble_torch::cuda_available() {
        let error = nimble.prepare(&[x.copy()], PrepareOptions::training()).unwrap_err();
        assert!(matches!(error, NimbleError::NoCuda), "{error}");
        let error = nimble.prepare_train_step(&[x.copy()], &y, PrepareOptions::training(), TrainStep::new(Optimizer::sgd(0.1))).unwrap_err();
        assert!(matches!(error, NimbleError::NoCuda), "{error}");
    }
    let cases = [
        (Optimizer::sgd(0.1).momentum(0.9).nesterov(true).weight_decay(-1.0), "weight decay is -1"),
        (Optimizer::sgd(-0.1), "learning rate is -0.1"),
        (Optimizer::Sgd { lr: 0.1, momentum: 0.9, dampening: 0.5, weight_decay: 0.0, nesterov: false }, "dampening is 0.5"),
        (Optimizer::sgd(0.1).nesterov(true), "dampening with Nesterov"),
        (Optimizer::Adam { lr: 1e-3, beta1: 1.0, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }, "beta is 1"),
    ];
    for (optimizer, expected) in cases {
        let error = nimble.prepare_train_step(&[x.copy()], &y, PrepareOptions::training(), TrainStep::new(optimizer)).unwrap_err();
        assert!(error.to_string().contains(expected), "expected `{expected}` in: {error}");
    }
    // Misuse before any prepare.
    assert!(matches!(nimble.train_step(&[x.copy()], &y).unwrap_err(), NimbleError::NotPrepared));
}

#[test]
fn the_fused_optimizer_updates_like_tchs_sgd_and_adam() {
    use tch::nn::OptimizerConfig;
    for (optimizer, lr) in [(Optimizer::sgd(0.1).momentum(0.9).weight_decay(5e-4), 0.1), (Optimizer::adam(1e-2).weight_decay(1e-4), 1e-2)] {
        tch::manual_seed(0);
        let vs_a = nn::VarStore::new(Device::Cpu);
        let a = nn::seq().add(nn::linear(vs_a.root() / "l1", 8, 16, Default::default())).add_fn(|x| x.relu()).add(nn::linear(vs_a.root() / "l2", 16, 3, Default::default()));
        let mut vs_b = nn::VarStore::new(Device::Cpu);
        let b = nn::seq().add(nn::linear(vs_b.root() / "l1", 8, 16, Default::default())).add_fn(|x| x.relu()).add(nn::linear(vs_b.root() / "l2", 16, 3, Default::default()));
        vs_b.copy(&vs_a).unwrap();
        let mut reference: Box<dyn FnMut(&Tensor)> = match optimizer {
            Optimizer::Sgd { .. } => {
                let mut opt = nn::Sgd { momentum: 0.9, dampening: 0.0, wd: 5e-4, nesterov: false }.build(&vs_a, lr).unwrap();
                Box::new(move |loss| opt.backward_step(loss))
            }
            Optimizer::Adam { .. } => {
                let mut opt = nn::Adam { wd: 1e-4, ..Default::default() }.build(&vs_a, lr).unwrap();
                Box::new(move |loss| opt.backward_step(loss))
            }
        };
        let mut fused = FusedOptimizer::new(vs_b.trainable_variables(), optimizer.clone()).unwrap();
        for _ in 0..10 {
            let x = Tensor::randn([4, 8], (Kind::Float, Device::Cpu));
            let y = Tensor::randint(3, [4], (Kind::Int64, Device::Cpu));
            reference(&nn::Module::forward(&a, &x).cross_entropy_for_logits(&y));
            fused.zero_grad().unwrap();
            nn::Module::forward(&b, &x).cross_entropy_for_logits(&y).backward();
            fused.step().unwrap();
        }
        let vb = vs_b.variables();
        for (name, va) in vs_a.variables() {
            let error = nimble_torch::relative_error(&vb[&name], &va);
            assert!(error < 1e-5, "{optimizer:?}: {name} differs by {error:.2e}");
        }
    }
    let mixed = FusedOptimizer::new(vec![Tensor::zeros([2], (Kind::Float, Device::Cpu)), Tensor::zeros([2], (Kind::Double, Device::Cpu))], Optimizer::sgd(0.1));
    assert!(mixed.err().unwrap().to_string().contains("parameter 1 is Double"));
}

#[test]
fn export_torchscript_writes_a_file_that_tchs_cmodule_runs_alike() {
    let (_vs, model) = frozen(|p| tch::vision::resnet::resnet18(p, 10));
    let x = Tensor::randn([2, 3, 32, 32], (Kind::Float, Device::Cpu));
    let expected = tch::no_grad(|| nn::ModuleT::forward_t(&model, &x, false));
    let dir = std::env::temp_dir().join(format!("nimble-export-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("resnet18.pt");
    Nimble::new(model).export_torchscript(&[x.copy()], &path).unwrap();
    let module = tch::CModule::load_on_device(&path, Device::Cpu).unwrap();
    let got = tch::no_grad(|| module.forward_ts(&[x.copy()])).unwrap();
    assert!(nimble_torch::relative_error(&got, &expected) < 1e-5);
    // Nothing half-written is left beside it; a bad path is an error, not a panic.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let error = Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].relu()]).export_torchscript(&[x], dir.join("missing/dir/m.pt")).unwrap_err();
    assert!(error.to_string().contains("missing/dir"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_fused_kernels_replace_squeeze_excitation_and_convolution_tails_of_efficientnet() {
    let (_vs, model) = frozen(|p| tch::vision::efficientnet::b0(p, 10));
    let x = input(&[2, 3, 64, 64]);
    let expected = tch::no_grad(|| nn::ModuleT::forward_t(&model, &x, false));
    let nimble = Nimble::new(model);
    let trace = nimble.trace(&[x.shallow_clone()], true).unwrap();
    let histogram = trace.op_histogram();
    // 16 blocks, each with one squeeze-and-excitation; 33 convolutions followed by SiLU (stem,
    // 15 expansions, 16 depthwise, head) and 9 projections followed by the residual add.
    assert_eq!(count(&trace, "nimble::squeeze_excite"), 16, "{histogram:?}");
    assert_eq!(count(&trace, "nimble::conv2d_fused"), 33 + 9, "{histogram:?}");
    for gone in ["aten::sigmoid", "aten::silu", "aten::add", "aten::adaptive_avg_pool2d"] {
        assert!(count(&trace, gone) <= usize::from(gone == "aten::adaptive_avg_pool2d"), "{gone}: {histogram:?}");
    }
    let out = nimble.run_optimized(&[x.shallow_clone()]).unwrap().remove(0);
    let error = nimble_torch::relative_error(&out, &expected);
    assert!(error < 1e-4, "fused forward differs from the model by {error:.2e}");
    // Without the fusions the rewrites leave these ops alone.
    let unfused = nimble.trace(&[x], false).unwrap();
    assert_eq!(count(&unfused, "nimble::squeeze_excite") + count(&unfused, "nimble::conv2d_fused"), 0);
}

#[test]
fn the_fused_kernels_take_only_tails_nothing_else_reads() {
    let forward = common::fusable_forward(Device::Cpu);
    let xs = common::fusable_inputs(3, 9, 5, Device::Cpu, false);
    let expected = tch::no_grad(|| forward(&xs));
    let nimble = Nimble::from_fn(forward);
    let trace = nimble.trace(&xs, true).unwrap();
    let histogram = trace.op_histogram();
    assert_eq!(count(&trace, "nimble::squeeze_excite"), 1, "{histogram:?}");
    assert_eq!(count(&trace, "nimble::conv2d_fused"), 3, "{histogram:?}");
    assert_eq!(count(&trace, "aten::conv2d"), 2, "{histogram:?}");
    assert_eq!(count(&trace, "aten::add") + count(&trace, "aten::relu6") + count(&trace, "aten::sigmoid"), 0, "{histogram:?}");
    assert_eq!((count(&trace, "aten::silu"), count(&trace, "aten::hardtanh")), (1, 1), "{histogram:?}");
    let out = nimble.run_optimized(&xs).unwrap();
    assert_eq!(out.len(), expected.len());
    for (i, (got, want)) in out.iter().zip(&expected).enumerate() {
        let error = nimble_torch::relative_error(got, want);
        assert!(error < 1e-5, "output {i} differs by {error:.2e}");
    }
}

#[test]
fn the_device_profiler_stops_after_a_failing_body_and_sees_no_device_work_on_the_cpu() {
    let failed = nimble_torch::profile(None, || -> nimble_torch::Result<()> { Err(NimbleError::InvalidInput("on purpose".into())) });
    assert!(matches!(failed, Err(NimbleError::InvalidInput(_))), "{failed:?}");
    // The profiler was stopped: a second one starts, and CPU work leaves no device activity.
    let (sum, profile) = nimble_torch::profile(None, || Ok(input(&[64, 64]).matmul(&input(&[64, 64])).sum(Kind::Float).double_value(&[]))).unwrap();
    assert!(sum.is_finite());
    if !nimble_torch::cuda_available() {
        assert!(profile.activities.is_empty(), "{:?}", profile.activities);
        assert!(profile.runs(1_000).is_empty());
    }
}

#[test]
fn tf32_for_convolutions_is_libtorchs_default_and_can_be_turned_off_and_on() {
    assert!(nimble_torch::conv_tf32().unwrap(), "libtorch lets float32 convolutions use TF32 by default");
    nimble_torch::set_conv_tf32(false).unwrap();
    let exact = nimble_torch::conv_tf32().unwrap();
    nimble_torch::set_conv_tf32(true).unwrap();
    assert!(!exact && nimble_torch::conv_tf32().unwrap());
}
