//! TorchScript modules traced on the CPU (what CI can run): values the host makes from shapes,
//! shape arithmetic, BatchNorm folding by precision, cuDNN settings, bound tensors, output
//! structures, several inputs, and what a module given the wrong inputs says.

use nimble_torch::{Nimble, NimbleError, PrepareOptions, Trace};
use tch::{Device, Kind, Tensor};

mod common;

fn input(shape: &[i64]) -> Tensor {
    tch::manual_seed(0);
    Tensor::randn(shape, (Kind::Float, Device::Cpu))
}

fn count(trace: &Trace, name: &str) -> usize {
    trace.ops.iter().filter(|op| op.name == name).count()
}

/// The fixture module `name` (tests/fixtures/make_modules.py), on the CPU.
fn fixture(name: &str) -> Nimble {
    Nimble::from_torchscript(common::torchscript_fixtures().join(name), Device::Cpu).unwrap()
}

#[test]
fn values_the_host_makes_from_shapes_are_folded_into_constants_and_random_ones_kept() {
    // Each fixture makes a value on the host from the input's shape alone (the op named), then
    // copies it to the parameters' device or indexes a parameter with it: with or without the
    // other rewrites, the trace (what `prepare` captures) holds a constant instead, and
    // computes what the model does. pooled_host_index passes the shape through a submodule's
    // returned tuple, as torchvision's MViT does. repeated_table repeats a parameter by a fixed
    // count, which on a GPU synchronizes (MViT-v1-B): the trace holds that copy made otherwise.
    let folded = [("host_values.pt", "aten::ones"), ("in_place_host_values.pt", "aten::arange"), ("host_index.pt", "aten::arange"), ("pooled_host_index.pt", "aten::arange"), ("repeated_table.pt", "aten::repeat_interleave")];
    for ((name, made_by), optimize) in folded.into_iter().flat_map(|fixture| [(fixture, true), (fixture, false)]) {
        let nimble = fixture(name);
        let x = input(&[2, 4, 3, 5]);
        let trace = nimble.trace(&[x.shallow_clone()], optimize).unwrap();
        let ops = || trace.ops.iter().map(|op| op.name.as_str()).collect::<Vec<_>>();
        assert_eq!(count(&trace, made_by), 0, "{name}, rewrites {optimize}: {:?}", ops());
        assert!(!trace.ops.is_empty(), "{name}");
        if optimize {
            let expected = nimble.eager(&[x.shallow_clone()]).unwrap();
            assert!(nimble_torch::relative_error(&nimble.run_optimized(&[x]).unwrap()[0], &expected[0]) <= 1e-6, "{name}");
        }
    }
    // Random numbers drawn on the host differ on every run: never a constant, also when they
    // change shape-made values in place.
    for name in ["random_host_values.pt", "random_in_place_host_values.pt"] {
        let trace = fixture(name).trace(&[input(&[2, 3])], false).unwrap();
        assert_eq!(count(&trace, "aten::rand"), 1, "{name}: {:?}", trace.op_histogram());
    }
}

#[test]
fn traced_shape_arithmetic_stays_on_the_host_and_out_of_the_task_graph() {
    // torch.jit.trace made `x.view(x.size(0), -1)` and `int(x.shape[1])` into aten::size ->
    // prim::NumToTensor -> aten::Int, whose aten::item reads a CPU scalar tensor (the prim ops
    // do not go through the dispatcher, so the item is the op the trace sees).
    let nimble = fixture("shape_arith.pt");
    let x = input(&[2, 3, 4, 4]);
    for optimize in [false, true] {
        let trace = nimble.trace(&[x.shallow_clone()], optimize).unwrap();
        // (Freezing, in the rewrites, folds some of the arithmetic of static shapes away.)
        assert!(optimize || count(&trace, "aten::item") >= 1, "{:?}", trace.op_histogram());
        assert!(trace.first_host_sync().is_none(), "{:?}", trace.ops);
        let graph = trace.task_graph().unwrap();
        // It writes no tensor (on a CUDA forward, the CPU-only arithmetic before it stays out too:
        // the GPU tests capture this module).
        assert!(graph.nodes().iter().all(|n| n.op != "aten::item"), "aten::item in the task graph: {graph:?}");
    }
    let expected = nimble.eager(&[x.shallow_clone()]).unwrap();
    let optimized = nimble.run_optimized(&[x]).unwrap();
    assert!(nimble_torch::relative_error(&optimized[0], &expected[0]) < 1e-5);
}

#[test]
fn batch_norm_is_folded_in_float32_and_in_half_precision_only_when_asked() {
    // Folded in half precision, the weights are rounded once more, which eager and the compiler
    // never do (ResNet-50 in bfloat16 drifted from eager 1.5 times as far as torch.compile, even
    // folded in float32): there BatchNorm stays an op of its own by default, and the rewritten
    // forward is eager's. Asked for (`fold_half_precision`), it is folded, in float32 and rounded
    // once, and the forward stays as close to eager as eager in that dtype is to float32.
    let x = input(&[2, 3, 8, 8]);
    let float = fixture("conv_bn.pt");
    let trace = float.trace(&[x.shallow_clone()], true).unwrap();
    assert_eq!(count(&trace, "aten::batch_norm"), 0, "{:?}", trace.op_histogram());
    let reference = float.eager(&[x.shallow_clone()]).unwrap().remove(0);
    for kind in [Kind::BFloat16, Kind::Half] {
        let mut half = fixture("conv_bn.pt");
        half.to_kind(kind).unwrap();
        let x = x.to_kind(kind);
        let trace = half.trace(&[x.shallow_clone()], true).unwrap();
        assert_eq!(count(&trace, "aten::batch_norm"), 2, "{kind:?}: {:?}", trace.op_histogram());
        let expected = half.eager(&[x.shallow_clone()]).unwrap().remove(0);
        let optimized = half.run_optimized(&[x.shallow_clone()]).unwrap().remove(0);
        assert_eq!(nimble_torch::relative_error(&optimized, &expected), 0.0, "{kind:?}");
        let folded = half.run_optimized_with(&[x], &PrepareOptions::inference().fold_half_precision(true)).unwrap().remove(0);
        assert_eq!(folded.kind(), kind);
        let (distance, own) = (nimble_torch::relative_error(&folded, &expected), nimble_torch::relative_error(&expected, &reference));
        assert!(distance > 0.0 && distance <= 2.0 * own, "{kind:?}: folded {distance:.2e} from eager, eager {own:.2e} from float32");
    }
}

#[test]
fn a_traced_modules_convolutions_follow_this_processs_cudnn_settings() {
    // torch.jit.trace records a convolution as aten::_convolution with the tracing process's
    // cuDNN flags as constants (TF32 on, benchmark off). Loaded, the module runs aten::conv2d,
    // which reads them at run time: eager can then be checked in exact float32 and timed with
    // cuDNN's benchmark on, as the graphs are.
    let nimble = fixture("shape_arith.pt");
    let trace = nimble.trace(&[input(&[2, 3, 4, 4])], false).unwrap();
    assert_eq!(count(&trace, "aten::_convolution"), 0, "{:?}", trace.op_histogram());
    assert_eq!(count(&trace, "aten::conv2d"), 1, "{:?}", trace.op_histogram());
}

#[test]
fn bound_tensors_are_what_the_module_reads_and_a_bad_binding_binds_nothing() {
    let mut nimble = fixture("shape_arith.pt");
    let x = input(&[2, 3, 4, 4]);
    let before = nimble.eager(&[x.shallow_clone()]).unwrap().remove(0);
    let weight = Tensor::zeros([10, 64], (Kind::Float, Device::Cpu));
    let bias = Tensor::arange(10, (Kind::Float, Device::Cpu));
    // A bad name or tensor anywhere in the list: an error naming it, and nothing bound.
    let bad = [
        (("fc.nope", weight.shallow_clone()), "no parameter or buffer `fc.nope`"),
        (("head.weight", weight.shallow_clone()), "no submodule `head`"),
        (("fc.weight", Tensor::zeros([64, 10], (Kind::Float, Device::Cpu))), "[10, 64]"),
        (("fc.weight", Tensor::zeros([10, 64], (Kind::Double, Device::Cpu))), "Double"),
    ];
    for ((name, tensor), expected) in bad {
        let list = vec![("fc.bias".to_string(), bias.shallow_clone()), (name.to_string(), tensor)];
        let err = nimble.bind_tensors(&list).unwrap_err();
        assert!(matches!(err, NimbleError::InvalidInput(_)) && err.to_string().contains(expected), "{name}: {err}");
        let after = nimble.eager(&[x.shallow_clone()]).unwrap().remove(0);
        assert_eq!(nimble_torch::relative_error(&after, &before), 0.0, "{name}: a failed binding changed the module");
    }
    nimble.bind_tensors(&[("fc.weight".into(), weight.shallow_clone()), ("fc.bias".into(), bias.shallow_clone())]).unwrap();
    // fc(y) * (channels // 4) + offset, with fc's weight zero: bias * 2 + arange(10).
    let expected = (&bias * 2.0 + Tensor::arange(10, (Kind::Float, Device::Cpu))).unsqueeze(0).expand([2, 10], false);
    assert_eq!(nimble_torch::relative_error(&nimble.eager(&[x.shallow_clone()]).unwrap()[0], &expected), 0.0);
    // The module reads the tensor itself, not a copy: a change in place is seen.
    let _ = bias.shallow_clone().fill_(1.0);
    let expected = Tensor::full([2, 10], 2.0, (Kind::Float, Device::Cpu)) + Tensor::arange(10, (Kind::Float, Device::Cpu));
    assert_eq!(nimble_torch::relative_error(&nimble.eager(&[x]).unwrap()[0], &expected), 0.0);
    let err = Nimble::from_fn(|xs: &[Tensor]| vec![xs[0].relu()]).bind_tensors(&[("w".into(), bias)]).unwrap_err();
    assert!(err.to_string().contains("TorchScript"), "{err}");
}

#[test]
fn outputs_keep_their_structure_with_none_and_constants() {
    use nimble_torch::Value;
    let nimble = fixture("structures.pt");
    let x = input(&[3, 6]);
    let value = nimble.eager_value(&[x.shallow_clone()]).unwrap();
    let Value::Tuple(items) = &value else { panic!("a tuple, got {value:?}") };
    assert_eq!(items.len(), 8, "{value:?}");
    assert!(matches!(items[0], Value::Tensor(_)) && matches!(items[1], Value::None), "{value:?}");
    assert!(matches!(&items[2], Value::List(list) if list.len() == 2), "{value:?}");
    let Value::Dict(entries) = &items[3] else { panic!("a dict, got {:?}", items[3]) };
    let keys: Vec<&str> = entries.iter().map(|(k, _)| if let Value::Str(k) = k { k.as_str() } else { "?" }).collect();
    assert_eq!(keys, ["tanh", "sum"]);
    assert!(matches!(items[4], Value::Int(3)) && matches!(items[5], Value::Float(x) if x == 0.5), "{value:?}");
    assert!(matches!(&items[6], Value::Str(s) if s == "nimble") && matches!(items[7], Value::Bool(true)), "{value:?}");
    // The flat tensors are the structure's, in order.
    let flat = nimble.eager(&[x]).unwrap();
    let tensors = value.tensors();
    assert_eq!(tensors.len(), 5);
    for (a, b) in tensors.iter().zip(&flat) {
        assert_eq!(nimble_torch::relative_error(a, b), 0.0);
    }
}

/// Inputs of `multi_input.pt`: int64 token ids, a bool mask, float32 features, int32 positions.
fn multi_inputs(batch: i64) -> Vec<Tensor> {
    vec![
        Tensor::randint(100, [batch, 5], (Kind::Int64, Device::Cpu)),
        Tensor::rand([batch, 5], (Kind::Float, Device::Cpu)).gt(0.3),
        input(&[batch, 5, 16]),
        Tensor::arange(5, (Kind::Int, Device::Cpu)).repeat([batch, 1]),
    ]
}

#[test]
fn several_inputs_of_several_dtypes_and_nested_outputs() {
    use nimble_torch::Value;
    let nimble = fixture("multi_input.pt");
    let inputs = multi_inputs(2);
    let value = nimble.eager_value(&inputs).unwrap();
    // ({"hidden": h, "pooled": p}, (relu(p), [tanh(p), ids]))
    let Value::Tuple(outer) = &value else { panic!("a tuple, got {value:?}") };
    assert!(matches!(&outer[0], Value::Dict(entries) if entries.len() == 2), "{value:?}");
    let Value::Tuple(pair) = &outer[1] else { panic!("a tuple, got {:?}", outer[1]) };
    let Value::List(list) = &pair[1] else { panic!("a list, got {:?}", pair[1]) };
    let Value::Tensor(ids) = &list[1] else { panic!("a tensor") };
    assert_eq!(ids.kind(), Kind::Int64);
    assert!(ids.equal(&inputs[0]));
    for optimize in [false, true] {
        let trace = nimble.trace(&inputs, optimize).unwrap();
        assert!(trace.first_host_sync().is_none() && !trace.is_empty(), "{:?}", trace.op_histogram());
    }
    let rewritten = nimble.run_optimized(&inputs).unwrap();
    assert!(nimble_torch::relative_error(&rewritten[0], value.tensors()[0]) < 1e-5);
}

#[test]
fn a_torchscript_module_given_the_wrong_inputs_says_what_it_expected() {
    let nimble = fixture("multi_input.pt");
    let error = nimble.eager(&multi_inputs(2)[..2]).unwrap_err().to_string();
    assert!(error.contains("forward") && error.contains("features"), "{error}");
    let mut wrong = multi_inputs(2);
    wrong[0] = input(&[2, 5]);
    let error = nimble.eager(&wrong).unwrap_err().to_string();
    assert!(error.contains("Long") || error.contains("Int"), "{error}");
}
