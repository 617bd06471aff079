#![cfg(feature = "torch")] // the zoo runs on libtorch
//! The model zoo against its references, on the CPU: parameter and operator counts, output
//! shapes, the CIFAR-10 variants, variable names and weight loading.
//!
//! The reference counts (in `models::MODELS`) come from the issue that specified the zoo and
//! were measured on the reference PyTorch definitions: parameters with 1000 classes, and the
//! top-level ATen ops of one evaluation forward at batch 1. Every model here matches both
//! exactly; no op is composed differently from its reference.

use experiments::models::{self, Dataset, MODELS};
use tch::{Device, Kind};

#[test]
fn every_model_has_its_references_parameter_and_op_counts_and_task_graph() {
    for info in MODELS {
        tch::manual_seed(0);
        let model = models::build(info.name, Dataset::ImageNet, Device::Cpu).unwrap();
        assert_eq!(model.parameter_count(), info.reference_params, "{}: parameters", info.name);
        let stats = model.graph_stats(1).unwrap();
        assert_eq!(stats.ops, info.reference_ops, "{}: top-level ops", info.name);
        // Views and other metadata-only ops are not tasks; each model has one to 58 of them
        // (NASNet's crops are slices).
        assert!(stats.tasks < stats.ops && stats.ops - stats.tasks <= 58, "{}: {} tasks of {} ops", info.name, stats.tasks, stats.ops);
        // The NAS cells are where the parallelism is (the paper's point); the CNNs are
        // (nearly) chains.
        let branchy = info.name.starts_with("nasnet") || info.name == "darts" || info.name == "amoebanet" || info.name == "inception-v3";
        assert_eq!(stats.width > 2, branchy, "{}: width {}", info.name, stats.width);
    }
}

#[test]
fn forward_gives_finite_logits_of_the_right_shape() {
    for info in MODELS {
        tch::manual_seed(1);
        let model = models::build(info.name, Dataset::ImageNet, Device::Cpu).unwrap();
        let y = tch::no_grad(|| model.forward(&model.input(2)));
        assert_eq!(y.size(), [2, 1000], "{}", info.name);
        assert!(bool::try_from(y.isfinite().all()).unwrap(), "{}: non-finite logits", info.name);
        // Random weights still give inputs different logits (nothing collapsed to a constant).
        let spread = (y.get(0) - y.get(1)).abs().max().double_value(&[]);
        assert!(spread > 0.0, "{}: both inputs gave the same logits", info.name);
    }
}

#[test]
fn cifar10_variants_of_the_training_models() {
    // (model, in-features of the classifier): 990 fewer classes remove 990 rows of weights and
    // biases and change nothing else.
    let trained = [("resnet50", 2048), ("mobilenet-v2", 1280), ("efficientnet-b0", 1280)];
    assert_eq!(MODELS.iter().filter(|m| m.training).map(|m| m.name).collect::<Vec<_>>(), trained.map(|(n, _)| n));
    for (name, features) in trained {
        let model = models::build(name, Dataset::Cifar10, Device::Cpu).unwrap();
        let info = models::info(name).unwrap();
        assert_eq!(model.parameter_count(), info.reference_params - 990 * (features + 1), "{name}");
        assert_eq!(model.input(4).size(), [4, 3, 32, 32]);
        assert_eq!(info.batch_sizes(Dataset::Cifar10), [32, 64, 128]);
        // Training mode: batch statistics, dropout on.
        let y = model.forward_t(&model.input(4), true);
        assert_eq!(y.size(), [4, 10], "{name}");
        assert!(bool::try_from(y.isfinite().all()).unwrap(), "{name}");
    }
    assert!(models::info("darts").unwrap().batch_sizes(Dataset::Cifar10).is_empty());
    assert_eq!(models::info("darts").unwrap().batch_sizes(Dataset::ImageNet), [1]);
    let error = models::build("darts", Dataset::Cifar10, Device::Cpu).err().unwrap();
    assert!(error.contains("no CIFAR-10 variant") && error.contains("mobilenet-v2"), "{error}");
    let error = models::build("vgg16", Dataset::ImageNet, Device::Cpu).err().unwrap();
    assert!(error.contains("unknown model `vgg16`") && error.contains("nasnet-a-mobile"), "{error}");
}

/// A few names and shapes per model from the reference state_dicts (`model.state_dict()` in
/// PyTorch): weights exported from the reference load only if they all line up.
/// (model, [(variable, shape)]).
type Expected = &'static [(&'static str, &'static [(&'static str, &'static [i64])])];

#[test]
fn variables_are_named_and_shaped_as_the_reference_state_dicts() {
    let expected: Expected = &[
        ("resnet50", &[("layer4.2.bn3.running_var", &[2048]), ("layer1.0.downsample.0.weight", &[256, 64, 1, 1]), ("fc.weight", &[1000, 2048])]),
        ("inception-v3", &[("Mixed_7c.branch3x3dbl_3b.conv.weight", &[384, 384, 3, 1]), ("AuxLogits.conv1.conv.weight", &[768, 128, 5, 5]), ("AuxLogits.fc.bias", &[1000]), ("Mixed_6e.branch7x7dbl_5.bn.running_mean", &[192])]),
        ("mobilenet-v2", &[("features.0.0.weight", &[32, 3, 3, 3]), ("features.1.conv.1.weight", &[16, 32, 1, 1]), ("features.17.conv.3.running_var", &[320]), ("features.18.1.weight", &[1280]), ("classifier.1.weight", &[1000, 1280])]),
        ("efficientnet-b0", &[("features.1.0.block.1.fc1.weight", &[8, 32, 1, 1]), ("features.2.0.block.0.0.weight", &[96, 16, 1, 1]), ("features.6.3.block.1.0.weight", &[1152, 1, 5, 5]), ("features.8.0.weight", &[1280, 320, 1, 1])]),
        ("efficientnet-b5", &[("features.0.0.weight", &[48, 3, 3, 3]), ("features.7.2.block.3.1.running_var", &[512]), ("classifier.1.weight", &[1000, 2048])]),
        (
            "nasnet-a-mobile",
            &[
                ("cell_stem_0.comb_iter_0_right.separable_1.pointwise_conv2d.weight", &[11, 32, 1, 1]),
                ("cell_stem_1.path_2.conv.weight", &[11, 32, 1, 1]),
                ("reduction_cell_1.comb_iter_4_left.separable_1.depthwise_conv2d.weight", &[176, 1, 3, 3]),
                ("cell_15.comb_iter_0_right.bn_sep_2.running_mean", &[176]),
                ("last_linear.weight", &[1000, 1056]),
            ],
        ),
        ("nasnet-a-large", &[("cell_6.path_1.conv.weight", &[168, 1008, 1, 1]), ("cell_17.conv_prev_1x1.conv.weight", &[672, 4032, 1, 1]), ("conv0.bn.weight", &[96])]),
        ("darts", &[("stem0.3.weight", &[48, 24, 3, 3]), ("cells.0.preprocess0.conv_2.weight", &[24, 48, 1, 1]), ("cells.13._ops.7.op.1.weight", &[192, 1, 3, 3]), ("cells.13._ops.0.op.7.weight", &[192]), ("classifier.weight", &[1000, 768])]),
        ("amoebanet", &[("cells.4._ops.8.1.weight", &[96, 96, 1, 7]), ("cells.4._ops.8.3.running_var", &[96]), ("cells.9._ops.3.op.1.weight", &[192, 1, 7, 7]), ("classifier.weight", &[1000, 576])]),
    ];
    for (name, variables) in expected {
        let model = models::build(name, Dataset::ImageNet, Device::Cpu).unwrap();
        let named = model.var_store().variables();
        for (variable, shape) in *variables {
            let tensor = named.get(*variable).unwrap_or_else(|| panic!("{name}: no variable `{variable}`"));
            assert_eq!(tensor.size(), *shape, "{name}: {variable}");
        }
    }
}

#[test]
fn weights_load_from_safetensors_and_ot_files() {
    let dir = std::env::temp_dir().join(format!("nimble-zoo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    tch::manual_seed(2);
    let source = models::build("darts", Dataset::ImageNet, Device::Cpu).unwrap();
    // Batch-norm statistics travel with the weights: give them non-default values first.
    tch::no_grad(|| {
        for (name, mut tensor) in source.var_store().variables() {
            if name.ends_with("running_mean") {
                let _ = tensor.uniform_(-0.1, 0.1);
            }
        }
    });
    let x = source.input(1);
    let expected = tch::no_grad(|| source.forward(&x));
    for file in ["darts.safetensors", "darts.ot"] {
        let path = dir.join(file);
        source.var_store().save(&path).unwrap();
        tch::manual_seed(3);
        let mut model = models::build("darts", Dataset::ImageNet, Device::Cpu).unwrap();
        assert!(!tch::no_grad(|| model.forward(&x)).allclose(&expected, 1e-6, 1e-6, false), "different seeds give different weights");
        model.load(&path).unwrap();
        let y = tch::no_grad(|| model.forward(&x));
        assert_eq!(y.kind(), Kind::Float);
        assert!(bool::try_from(y.eq_tensor(&expected).all()).unwrap(), "{file}: loaded model differs");
    }
    // Another model's file names what is missing; an unknown format is refused up front.
    let mut other = models::build("amoebanet", Dataset::ImageNet, Device::Cpu).unwrap();
    let error = other.load(&dir.join("darts.safetensors")).unwrap_err();
    assert!(error.contains("amoebanet") && error.contains("cells."), "{error}");
    let error = other.load(&dir.join("weights.pth")).unwrap_err();
    assert!(error.contains("expected a .safetensors or .ot"), "{error}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Numerical parity with the reference PyTorch models, when their exports are at hand:
/// `python3 experiments/reference/export_reference.py DIR` writes each reference's weights, an
/// input and its output; the Rust model loads the weights by name and must give the same
/// output. Skipped (with a notice) unless `NIMBLE_REFERENCE_DIR=DIR` is set, since CI has no
/// torchvision.
#[test]
fn outputs_match_the_reference_pytorch_models() {
    let Some(dir) = std::env::var_os("NIMBLE_REFERENCE_DIR") else {
        eprintln!("notice: NIMBLE_REFERENCE_DIR not set; skipping the numerical parity check (see experiments/reference/export_reference.py)");
        return;
    };
    let dir = std::path::PathBuf::from(dir);
    let mut checked = 0;
    for info in MODELS {
        let path = dir.join(format!("{}.safetensors", info.name));
        if !path.exists() {
            eprintln!("notice: {} has no reference export in {}", info.name, dir.display());
            continue;
        }
        let mut model = models::build(info.name, Dataset::ImageNet, Device::Cpu).unwrap();
        model.load(&path).unwrap();
        let tensors: std::collections::HashMap<_, _> = tch::Tensor::read_safetensors(&path).unwrap().into_iter().collect();
        let y = tch::no_grad(|| model.forward(&tensors["__input__"]));
        let expected = &tensors["__output__"];
        let error = ((&y - expected).norm().double_value(&[])) / expected.norm().double_value(&[]);
        eprintln!("{}: relative error {error:.2e} against {}", info.name, info.reference);
        assert!(error < 1e-5, "{}: relative error {error:e}", info.name);
        checked += 1;
    }
    assert!(checked > 0, "no reference exports in {}", dir.display());
}

#[test]
fn zoo_models_export_to_torchscript_that_tchs_cmodule_runs_alike() {
    use experiments::inference::{torchscript_checked, InferConfig};
    let config = InferConfig { batch: 1, warmup: 0, iterations: 0, algorithm: "nimble".into(), fuse_conv_relu: false, fuse_kernels: true, channels_last: None, exact_check: false, freeze_on_host: false };
    for name in ["mobilenet-v2", "darts"] {
        let model = models::build(name, Dataset::ImageNet, Device::Cpu).unwrap();
        let (_module, check) = torchscript_checked(&model, &config).unwrap();
        let error = check.relative_error;
        assert!(error < 1e-5, "{name}: TorchScript differs from eager by {error:.2e}");
        assert!(check.reference_scale > 0.0 && check.input_sensitive, "{name}: the check proves nothing: {check:?}");
    }
}
