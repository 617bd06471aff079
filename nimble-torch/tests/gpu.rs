//! GPU tests: prepare tch::vision models, replay them against eager tch, and check the errors
//! and the memory contract (TorchScript modules: `gpu_torchscript.rs`). Without a CUDA device each test prints a notice and passes; with
//! `NIMBLE_REQUIRE_GPU=1` it fails instead. Run them on the lent GPU with
//! `scripts/device/run-torch-suite.sh`.

use std::cell::Cell;
use std::rc::Rc;

use nimble_torch::{cuda_allocated_bytes, cuda_synchronize, relative_error, CaptureMode, Nimble, NimbleError, PrepareOptions};
use tch::nn::{self, ModuleT};
use tch::{Device, Kind, Tensor};

mod common;
use common::gpu;

const CUDA: Device = Device::Cuda(0);

fn randn(shape: &[i64]) -> Tensor {
    Tensor::randn(shape, (Kind::Float, CUDA))
}

type Forward = Rc<dyn Fn(&Tensor) -> Tensor>;

/// A model with random weights on the GPU, its VarStore frozen (as the rewrites need), in eval
/// mode. Keep the VarStore while the forward is used.
fn frozen<M: ModuleT + 'static>(build: impl FnOnce(&nn::Path) -> M) -> (nn::VarStore, Forward) {
    let mut vs = nn::VarStore::new(CUDA);
    let model = build(&vs.root());
    vs.freeze();
    (vs, Rc::new(move |x: &Tensor| model.forward_t(x, false)))
}

/// A Nimble over a shared forward.
fn wrap(forward: &Forward) -> Nimble {
    let f = forward.clone();
    Nimble::from_fn(move |xs: &[Tensor]| vec![f(&xs[0])])
}

type Build = fn() -> (nn::VarStore, Forward);

/// Fresh inputs per model and setting in the replay tests: `NIMBLE_TEST_REPLAYS`, 1,000 unset.
fn replays() -> usize {
    std::env::var("NIMBLE_TEST_REPLAYS").ok().and_then(|v| v.parse().ok()).unwrap_or(1000)
}

const MODELS: &[(&str, i64, Build)] = &[
    ("resnet50", 224, || frozen(|p| tch::vision::resnet::resnet50(p, 1000))),
    ("inception-v3", 299, || frozen(|p| tch::vision::inception::v3(p, 1000))),
    ("mobilenet-v2", 224, || frozen(|p| tch::vision::mobilenet::v2(p, 1000))),
    ("efficientnet-b0", 224, || frozen(|p| tch::vision::efficientnet::b0(p, 1000))),
];

#[test]
fn vision_models_match_eager_over_1000_fresh_inputs() {
    let Some(_gpu) = gpu() else { return };
    let replays = replays();
    for &(name, size, build) in MODELS {
        tch::manual_seed(0);
        let (_vs, forward) = build();
        for (optimize, tolerance) in [(true, 1e-3), (false, 1e-5)] {
            let mut nimble = wrap(&forward);
            let report = nimble.prepare(&[randn(&[1, 3, size, size])], PrepareOptions::inference().optimize(optimize)).unwrap().clone();
            let mut worst = 0f64;
            for _ in 0..replays {
                let x = randn(&[1, 3, size, size]);
                let reference = tch::no_grad(|| forward(&x));
                let out = nimble.forward(&[x]).unwrap().remove(0);
                worst = worst.max(relative_error(&out, &reference));
            }
            eprintln!(
                "{name:<16} optimize={optimize:<5} ops {:>4} streams {:>2} syncs {:>3} kernels {:>4} width {:>2} prepare {:.2} s: worst rel. error over {replays} replays {worst:.2e}",
                report.ops, report.streams, report.syncs, report.kernel_nodes, report.graph_width, report.seconds.total
            );
            assert!(worst <= tolerance, "{name} optimize={optimize}: relative error {worst:e} > {tolerance:e}");
            let graph = nimble.task_graph().unwrap();
            assert!(graph.nodes().iter().all(|n| n.duration_us.is_some_and(|d| d >= 0.0)), "{name}: every task has a measured duration");
        }
    }
}

#[test]
fn rewrites_reduce_kernels_and_nimble_uses_several_streams_on_inception() {
    let Some(_gpu) = gpu() else { return };
    let (_vs, forward) = frozen(|p| tch::vision::inception::v3(p, 1000));
    let mut kernels = Vec::new();
    for optimize in [false, true] {
        let mut nimble = wrap(&forward);
        let report = nimble.prepare(&[randn(&[1, 3, 299, 299])], PrepareOptions::inference().optimize(optimize)).unwrap();
        assert!(report.streams >= 4, "Inception's blocks have 4 to 6 branches: {report:?}");
        assert!(report.graph_width >= report.streams.min(6), "the captured graph keeps the plan's concurrency: {report:?}");
        kernels.push(report.kernel_nodes);
        if optimize {
            let kinds = nimble.optimized_node_kinds().unwrap().unwrap();
            assert!(!kinds.iter().any(|(k, _)| k == "aten::batch_norm"), "BatchNorm folded: {kinds:?}");
            assert!(kinds.iter().any(|(k, _)| k.starts_with("aten::cudnn_convolution")), "conv+ReLU fused: {kinds:?}");
        }
    }
    eprintln!("inception-v3 kernel nodes: {} raw, {} optimized", kernels[0], kernels[1]);
    assert!(kernels[1] < kernels[0], "{kernels:?}");
}

#[test]
fn fused_kernels_match_aten_eagerly_and_captured_and_cut_efficientnets_kernels() {
    let Some(_gpu) = gpu() else { return };
    // Each kernel path: warp-per-plane and block-per-plane squeeze-excitation, scalar and
    // vectorized epilogues, NCHW and channels-last outputs, same-shape and broadcast residuals.
    let forward = Rc::new(common::fusable_forward(CUDA));
    for (batch, h, w, channels_last) in [(3, 9, 5, false), (2, 64, 64, false), (1, 56, 56, true), (4, 7, 7, true)] {
        let case = format!("{batch}x4x{h}x{w}{}", if channels_last { " channels-last" } else { "" });
        let xs = common::fusable_inputs(batch, h, w, CUDA, channels_last);
        let expected = tch::no_grad(|| forward(&xs));
        let f = forward.clone();
        let mut nimble = Nimble::from_fn(move |xs: &[Tensor]| f(xs));
        let eager = nimble.run_optimized(&xs).unwrap();
        let report = nimble.prepare(&xs, PrepareOptions::inference()).unwrap().clone();
        assert_eq!(report.fused_ops, 4, "{case}: {report:?}");
        let fresh = common::fusable_inputs(batch, h, w, CUDA, channels_last);
        let reference = tch::no_grad(|| forward(&fresh));
        let replayed = nimble.forward(&fresh).unwrap();
        for (i, want) in expected.iter().enumerate() {
            // cuDNN's benchmark mode may pick another algorithm in each run, TF32 ones included
            // (libtorch allows TF32 in cuDNN's convolutions by default): two runs of one
            // convolution differ by up to about 1e-3. A wrong kernel is off by order 1.
            let (e, r) = (relative_error(&eager[i], want), relative_error(&replayed[i], &reference[i]));
            assert!(e <= 2e-3 && r <= 2e-3, "{case}: output {i} differs by {e:.2e} eagerly, {r:.2e} replayed");
        }
    }
    let (_vs, forward) = frozen(|p| tch::vision::efficientnet::b0(p, 1000));
    let mut kernels = Vec::new();
    for fuse in [false, true] {
        let mut nimble = wrap(&forward);
        let report = nimble.prepare(&[randn(&[1, 3, 224, 224])], PrepareOptions::inference().fuse_kernels(fuse)).unwrap().clone();
        // 16 squeeze-and-excitation blocks, 33 + 9 convolution tails, the classifier's linear.
        assert_eq!(report.fused_ops, if fuse { 16 + 33 + 9 + 1 } else { 0 }, "{report:?}");
        // Both layouts are timed, whatever op the fusion made of the convolutions, and the
        // faster is kept.
        let trial = report.layout_trial.expect("a model with convolutions gets a layout trial");
        assert_eq!(report.channels_last, trial.nhwc_us < trial.nchw_us, "{report:?}");
        let x = randn(&[1, 3, 224, 224]);
        let reference = tch::no_grad(|| forward(&x));
        let error = relative_error(&nimble.forward(&[x]).unwrap()[0], &reference);
        assert!(error <= 1e-3, "efficientnet-b0 fuse_kernels={fuse}: relative error {error:.2e}");
        kernels.push(report.kernel_nodes);
    }
    eprintln!("efficientnet-b0 kernel nodes: {} with ATen's ops, {} with Nimble's fused kernels", kernels[0], kernels[1]);
    // cuDNN runs most convolutions as more than one kernel, so the saving is smaller than the
    // op count suggests (293 to 268 kernels on the H200); at least one per block it must be.
    assert!(kernels[1] + 16 <= kernels[0], "{kernels:?}");
}

#[test]
fn squeeze_excitation_kernels_match_aten_in_both_layouts_for_any_channel_count() {
    let Some(_gpu) = gpu() else { return };
    // 37 channels: two warps of channels per pixel in NHWC, the second mostly idle, and no
    // four-wide scaling; 96 over 56×56: many chunks per plane; 8 over 3×3: one short chunk.
    for (batch, channels, h, w) in [(2, 37, 13, 11), (1, 96, 56, 56), (5, 8, 3, 3)] {
        let squeeze = (channels / 4).max(1);
        let scaled = |shape: [i64; 4]| randn(&shape) / (shape[1] as f64).sqrt();
        let (w1, b1, w2, b2) = (scaled([squeeze, channels, 1, 1]), randn(&[squeeze]), scaled([channels, squeeze, 1, 1]), randn(&[channels]));
        let forward = Rc::new(move |xs: &[Tensor]| {
            let x = &xs[0];
            let gate = x.adaptive_avg_pool2d([1, 1]).conv2d(&w1, Some(&b1), [1, 1], [0, 0], [1, 1], 1).silu();
            vec![x * gate.conv2d(&w2, Some(&b2), [1, 1], [0, 0], [1, 1], 1).sigmoid()]
        });
        for channels_last in [false, true] {
            let case = format!("{batch}x{channels}x{h}x{w}{}", if channels_last { " channels-last" } else { "" });
            let input = || {
                let x = randn(&[batch, channels, h, w]);
                if channels_last { x.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2]) } else { x }
            };
            let f = forward.clone();
            let mut nimble = Nimble::from_fn(move |xs: &[Tensor]| f(xs));
            let report = nimble.prepare(&[input()], PrepareOptions::inference().channels_last(Some(channels_last))).unwrap().clone();
            assert_eq!((report.fused_ops, report.channels_last), (1, channels_last), "{case}: {report:?}");
            for _ in 0..3 {
                let x = input();
                let reference = tch::no_grad(|| forward(std::slice::from_ref(&x))).remove(0);
                let error = relative_error(&nimble.forward(&[x]).unwrap()[0], &reference);
                assert!(error <= 2e-3, "{case}: replayed output differs by {error:.2e}");
            }
        }
    }
}

#[test]
fn every_capture_mode_and_the_single_stream_plan_work() {
    let Some(_gpu) = gpu() else { return };
    let (_vs, forward) = frozen(|p| tch::vision::mobilenet::v2(p, 1000));
    for (mode, algorithm) in [(CaptureMode::Global, "nimble"), (CaptureMode::Relaxed, "nimble"), (CaptureMode::ThreadLocal, "single"), (CaptureMode::ThreadLocal, "round-robin:3")] {
        let mut nimble = wrap(&forward);
        let report = nimble.prepare(&[randn(&[2, 3, 224, 224])], PrepareOptions::inference().capture_mode(mode).algorithm(algorithm).optimize(false)).unwrap();
        if algorithm == "single" {
            assert_eq!((report.streams, report.syncs), (1, 0));
        }
        let x = randn(&[2, 3, 224, 224]);
        let reference = tch::no_grad(|| forward(&x));
        let out = nimble.forward_owned(&[x]).unwrap().remove(0);
        assert!(relative_error(&out, &reference) <= 1e-5, "{mode:?} {algorithm}");
    }
}

#[test]
fn multi_input_functions_and_owned_outputs() {
    let Some(_gpu) = gpu() else { return };
    let mut nimble = Nimble::from_fn(|xs: &[Tensor]| {
        let a = xs[0].matmul(&xs[1]).relu();
        let b = (&xs[0] * 2.0).sigmoid();
        vec![a.sum_dim_intlist(Some(&[1i64][..]), false, Kind::Float), b]
    });
    let (x, y) = (randn(&[64, 64]), randn(&[64, 64]));
    let report = nimble.prepare(&[x, y], PrepareOptions::inference().optimize(false)).unwrap();
    assert!(report.streams >= 2, "matmul and sigmoid are independent: {report:?}");
    let (x, y) = (randn(&[64, 64]), randn(&[64, 64]));
    let first = nimble.forward_owned(&[x.shallow_clone(), y.shallow_clone()]).unwrap();
    let aliased = nimble.forward(&[x.shallow_clone(), y.shallow_clone()]).unwrap();
    let expected_a = x.matmul(&y).relu().sum_dim_intlist(Some(&[1i64][..]), false, Kind::Float);
    assert!(relative_error(&first[0], &expected_a) <= 1e-5);
    assert!(relative_error(&first[1], &(&x * 2.0).sigmoid()) <= 1e-6);
    let _ = nimble.forward(&[randn(&[64, 64]), randn(&[64, 64])]).unwrap();
    cuda_synchronize().unwrap();
    assert!(relative_error(&aliased[1], &(&x * 2.0).sigmoid()) > 1e-3, "forward's outputs are the graph's own, overwritten by the next replay");
    assert!(relative_error(&first[1], &(&x * 2.0).sigmoid()) <= 1e-6, "forward_owned's are copies");
}

#[test]
fn host_syncs_are_refused_naming_the_op() {
    let Some(_gpu) = gpu() else { return };
    let cases: Vec<(&str, Nimble)> = vec![
        ("aten::nonzero", Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].relu().nonzero()])),
        ("aten::item", Nimble::from_fn(|xs: &[Tensor]| {
            let scale = xs[0].sum(Kind::Float).double_value(&[]);
            vec![&xs[0] * scale]
        })),
        ("aten::to", Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].relu().to_device(Device::Cpu)])),
    ];
    for (op, mut nimble) in cases {
        let error = nimble.prepare(&[randn(&[16])], PrepareOptions::inference().optimize(false)).unwrap_err();
        assert!(matches!(error, NimbleError::HostSync { .. }), "{op}: {error}");
        assert!(error.to_string().contains(op), "{op}: {error}");
        assert!(matches!(nimble.forward(&[randn(&[16])]), Err(NimbleError::NotPrepared)));
    }
    // Nothing was left armed or capturing: a good model prepares afterwards.
    let mut good = Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].relu()]);
    good.prepare(&[randn(&[16])], PrepareOptions::inference().optimize(false)).unwrap();
}

#[test]
fn a_changing_op_sequence_is_refused_naming_the_op() {
    let Some(_gpu) = gpu() else { return };
    let calls = Cell::new(0);
    let mut nimble = Nimble::from_fn(move |xs: &[Tensor]| {
        calls.set(calls.get() + 1);
        let x = xs[0].relu();
        vec![if calls.get() > 3 { x.tanh() } else { x.sigmoid() }]
    });
    let error = nimble.prepare(&[randn(&[16])], PrepareOptions::inference().optimize(false)).unwrap_err();
    assert!(matches!(error, NimbleError::OpMismatch { .. }), "{error}");
    assert!(error.to_string().contains("op #1 is aten::tanh"), "{error}");
}

#[test]
fn forward_checks_count_shape_dtype_and_device() {
    let Some(_gpu) = gpu() else { return };
    let mut nimble = Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].relu()]);
    nimble.prepare(&[randn(&[4, 8])], PrepareOptions::inference().optimize(false)).unwrap();
    let cases: Vec<(Vec<Tensor>, &str)> = vec![
        (vec![], "got 0 input tensors, expected 1"),
        (vec![randn(&[4, 8]), randn(&[4, 8])], "got 2 input tensors, expected 1"),
        (vec![randn(&[4, 9])], "the shape is [4, 9], expected [4, 8]"),
        (vec![randn(&[4, 8]).to_kind(Kind::Double)], "the dtype is Double, expected Float"),
        (vec![Tensor::randn([4, 8], (Kind::Float, Device::Cpu))], "the device is Cpu, expected Cuda(0)"),
    ];
    for (inputs, expected) in cases {
        let error = nimble.forward(&inputs).unwrap_err();
        assert!(error.to_string().contains(expected), "{error} (expected: {expected})");
    }
    let cpu = Tensor::randn([4, 8], (Kind::Float, Device::Cpu));
    let error = Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].relu()]).prepare(&[cpu], PrepareOptions::inference()).unwrap_err();
    assert!(error.to_string().contains("expected a CUDA device"), "{error}");
}

#[test]
fn dropping_a_prepared_model_returns_its_memory() {
    let Some(_gpu) = gpu() else { return };
    // MobileNetV2's depthwise convolutions make prepare build and time both layouts (ResNet-50
    // gets a trial only when its first prepare is short): the graph it does not keep must come
    // back too.
    for (name, build) in [("resnet50", MODELS[0].2), ("mobilenet-v2", MODELS[2].2)] {
        let (_vs, forward) = build();
        let cycle = || {
            let mut nimble = wrap(&forward);
            let report = nimble.prepare(&[randn(&[1, 3, 224, 224])], PrepareOptions::inference()).unwrap();
            assert!(report.layout_trial.is_some() || name == "resnet50", "{name}: {report:?}");
            for _ in 0..10 {
                let _ = nimble.forward(&[randn(&[1, 3, 224, 224])]).unwrap();
            }
            cuda_synchronize().unwrap();
        };
        cuda_synchronize().unwrap();
        let before_first = cuda_allocated_bytes(0).unwrap();
        cycle();
        cuda_synchronize().unwrap();
        let after_first = cuda_allocated_bytes(0).unwrap();
        // libtorch keeps one cuBLAS workspace per (handle, stream) it has seen, for the process's
        // lifetime: the first prepare on a pool stream leaves those behind. Nimble's own memory
        // (static inputs and outputs, the graph's pool, the pre-run's tensors) must all come back.
        eprintln!("{name} allocated bytes: {before_first} before the first prepare, {after_first} after its drop (libtorch's per-stream cuBLAS workspaces)");
        cycle();
        cuda_synchronize().unwrap();
        let after_second = cuda_allocated_bytes(0).unwrap();
        eprintln!("{name} allocated bytes: {after_first} before the second prepare, {after_second} after its drop");
        assert_eq!(after_second, after_first, "{name}: a prepared model's memory comes back when it is dropped");
    }
}

#[test]
fn the_device_profile_of_a_replay_holds_every_captured_kernel_on_the_planned_streams() {
    let Some(_gpu) = gpu() else { return };
    let (_vs, forward) = frozen(|p| tch::vision::inception::v3(p, 1000));
    let mut nimble = wrap(&forward);
    let report = nimble.prepare(&[randn(&[1, 3, 299, 299])], PrepareOptions::inference()).unwrap().clone();
    let inputs: Vec<Tensor> = (0..4).map(|_| randn(&[1, 3, 299, 299])).collect();
    cuda_synchronize().unwrap();
    let ((), profile) = nimble_torch::profile(None, || {
        for x in &inputs {
            nimble.forward(std::slice::from_ref(x))?;
            cuda_synchronize()?;
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        Ok(())
    })
    .unwrap();
    let runs = profile.runs(1_000_000);
    assert_eq!(runs.len(), inputs.len(), "{runs:?}");
    for run in &runs {
        // The replay's kernels, plus the input's copy into the static input (a copy or a kernel).
        assert!((report.kernel_nodes..=report.kernel_nodes + 1).contains(&run.kernels), "{run:?} against {report:?}");
        assert!(run.activities <= report.graph_nodes + 1, "{run:?} against {report:?}");
        assert!(run.streams >= 2, "Nimble's plan puts Inception's branches on several streams: {run:?}");
        assert!(run.busy_us <= run.span_us + 1e-6 && run.busy_us <= run.work_us + 1e-6, "{run:?}");
    }
    let names = profile.by_name();
    assert!(names.iter().any(|n| n.name.to_lowercase().contains("conv") || n.name.contains("sm90") || n.name.contains("gemm")), "{:?}", &names[..5.min(names.len())]);
    // A second profile starts after the first.
    let ((), again) = nimble_torch::profile(None, || nimble.forward(std::slice::from_ref(&inputs[0])).map(drop)).unwrap();
    assert_eq!(again.runs(1_000_000).len(), 1);
}

#[test]
fn kernel_timed_graphs_give_each_op_its_own_kernels_and_add_up_to_the_one_stream_replay() {
    let Some(_gpu) = gpu() else { return };
    let (_vs, forward) = frozen(|p| tch::vision::inception::v3(p, 1000));
    let x = randn(&[1, 3, 299, 299]);
    // The one-stream graph: its replay is what the ops' kernel spans must add up to.
    let mut single = wrap(&forward);
    let report = single.prepare(std::slice::from_ref(&x), PrepareOptions::inference().algorithm("single")).unwrap().clone();
    for _ in 0..20 {
        single.forward(std::slice::from_ref(&x)).unwrap();
    }
    let mut times: Vec<f64> = (0..50).map(|_| nimble_torch::cuda_time(|| single.forward(std::slice::from_ref(&x)).map(drop)).unwrap() * 1e3).collect();
    times.sort_by(f64::total_cmp);
    let replay_us = times[times.len() / 2];
    let graph = single.kernel_timed_graph().unwrap();
    let mut kernels = 0;
    let (mut time, mut span) = (0.0, 0.0);
    for node in graph.nodes() {
        let d = node.duration_us.expect("every op has a kernel-derived duration");
        // From its first start to its last end: gaps between its kernels included.
        let s = node.attrs["kernel_span_us"].as_f64().unwrap();
        assert!(d <= s + 1e-9 && d >= 0.0, "{node:?}");
        let n = node.attrs["kernels"].as_u64().unwrap() as usize;
        assert_eq!(n == 0, d == 0.0, "ops without kernels, and only they, take no time: {node:?}");
        if let Some(share) = node.attrs.get("sm_share") {
            let share = share.as_f64().unwrap();
            assert!(share > 0.0 && share <= 1.0, "{node:?}");
        }
        assert!(node.attrs.contains_key("event_us"), "the event-timed duration is kept: {node:?}");
        kernels += n;
        time += d;
        span += s;
    }
    // Every captured kernel belongs to an op (the task graph leaves out CPU-only ops).
    assert!(kernels <= report.graph_nodes && kernels >= report.kernel_nodes, "{kernels} activities against {report:?}");
    // The ops' times leave out only the gaps between kernels and the launch. (Not their spans:
    // under the profiler some processes replay with gaps that the replay timed here has not.)
    assert!(time <= replay_us && time >= 0.6 * replay_us, "op times {time:.1} µs (spans {span:.1}) against a replay of {replay_us:.1} µs");
    let event: f64 = graph.nodes().iter().map(|n| n.attrs["event_us"].as_f64().unwrap()).sum();
    assert!(time < event, "kernel time {time:.1} µs must be under the event pairs' {event:.1} µs");
    assert!(graph.nodes().iter().any(|n| n.attrs.contains_key("sm_share")), "the profiler reports kernels' grids");
    eprintln!("inception-v3: replay {replay_us:.1} µs, op times {time:.1}, spans {span:.1}, event pairs {event:.1}; {kernels} kernels");
    // Not for a model that was never prepared.
    assert!(wrap(&forward).kernel_timed_graph().unwrap_err().to_string().contains("prepare first"));
}

#[test]
fn a_model_that_views_a_convolutions_output_keeps_nchw_without_a_layout_trial() {
    let Some(_gpu) = gpu() else { return };
    // `view` needs the contiguous layout, so channels-last cannot run this forward at all: the
    // rewrites fall back to NCHW, and there is no layout to try.
    let (w, fc) = (randn(&[8, 3, 3, 3]) / 5.0, randn(&[10, 8 * 6 * 6]) / 17.0);
    let forward: Forward = Rc::new(move |x: &Tensor| x.conv2d::<Tensor>(&w, None, [1, 1], [0, 0], [1, 1], 1).relu().view([-1, 8 * 6 * 6]).matmul(&fc.tr()));
    let mut nimble = wrap(&forward);
    let report = nimble.prepare(&[randn(&[2, 3, 8, 8])], PrepareOptions::inference()).unwrap().clone();
    assert!(!report.channels_last && report.layout_trial.is_none(), "{report:?}");
    let x = randn(&[2, 3, 8, 8]);
    let reference = tch::no_grad(|| forward(&x));
    let error = relative_error(&nimble.forward(&[x]).unwrap()[0], &reference);
    assert!(error <= 2e-3, "relative error {error:.2e}");
}

#[test]
fn a_half_precision_model_whose_one_convolution_is_its_stem_keeps_nchw_and_eagers_numbers() {
    let Some(_gpu) = gpu() else { return };
    // A vision transformer's patch embedding, then tokens through a linear layer. In NHWC that
    // one convolution ran through other cuDNN kernels than eager's, and SigLIP's vision tower in
    // bfloat16 moved further from eager than the compiler's output (0.0175 against 0.0161): in
    // half precision the layout stays NCHW, untried, and the graph computes eager's numbers. In
    // float32 the layout is still chosen (NHWC by default, tried when prepare was short).
    for kind in [Kind::BFloat16, Kind::Half, Kind::Float] {
        let (w, b, fc) = ((randn(&[64, 3, 8, 8]) / 14.0).to_kind(kind), (randn(&[64]) / 10.0).to_kind(kind), (randn(&[32, 64]) / 8.0).to_kind(kind));
        let forward: Forward = Rc::new(move |x: &Tensor| x.conv2d(&w, Some(&b), [8, 8], [0, 0], [1, 1], 1).flatten(2, 3).transpose(1, 2).matmul(&fc.tr()).gelu("none"));
        let mut nimble = wrap(&forward);
        let report = nimble.prepare(&[randn(&[1, 3, 64, 64]).to_kind(kind)], PrepareOptions::inference()).unwrap().clone();
        let half = kind != Kind::Float;
        if half {
            assert!(!report.channels_last && report.layout_trial.is_none(), "{kind:?}: {report:?}");
        } else {
            assert!(report.channels_last || report.layout_trial.is_some(), "{kind:?}: {report:?}");
        }
        for _ in 0..3 {
            let x = randn(&[1, 3, 64, 64]).to_kind(kind);
            let reference = tch::no_grad(|| forward(&x));
            let error = relative_error(&nimble.forward(&[x]).unwrap()[0], &reference);
            assert!(if half { error == 0.0 } else { error <= 1e-3 }, "{kind:?}: relative error {error:.2e}");
        }
    }
}
