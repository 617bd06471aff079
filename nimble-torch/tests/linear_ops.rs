//! The inference rewrites for transformer blocks on CPU tensors: linear layers become
//! `nimble::linear` with their activation or residual fused in (and only those), attention masks
//! go through `nimble::attention_mask` (which gives the fused kernels a mask they take), and the
//! rewritten forward computes what the model does.

use nimble_torch::{Nimble, Trace};
use tch::{Device, Kind, Tensor};

fn count(trace: &Trace, name: &str) -> usize {
    trace.ops.iter().filter(|op| op.name == name).count()
}

fn assert_same_outputs(got: &[Tensor], expected: &[Tensor], bound: f64) {
    assert_eq!(got.len(), expected.len());
    for (i, (got, want)) in got.iter().zip(expected).enumerate() {
        let error = nimble_torch::relative_error(got, want);
        assert!(error < bound, "output {i} differs from the model's by {error:.2e}");
    }
}

/// Weights scaled by 1/sqrt(fan-in), biases of order 1. No two layers read the same input, so
/// the frozen graph's concatenation of such layers leaves them apart.
fn layer(outputs: i64, inputs: i64) -> (Tensor, Tensor) {
    let opts = (Kind::Float, Device::Cpu);
    (Tensor::randn([outputs, inputs], opts) / (inputs as f64).sqrt(), Tensor::randn([outputs], opts))
}

#[test]
fn linear_layers_take_their_activation_or_residual_and_nothing_else_reads() {
    tch::manual_seed(5);
    let (w1, b1) = layer(16, 8);
    let (w2, b2) = layer(8, 16);
    let (w3, b3) = layer(8, 8);
    let (w4, b4) = layer(8, 8);
    let (w5, _) = layer(8, 8);
    let forward = move |xs: &[Tensor]| {
        // Fused: exact GELU; a residual the layer's input is computed from; tanh GELU.
        let hidden = xs[0].linear(&w1, Some(&b1)).gelu("none");
        let block = &xs[0] + hidden.linear(&w2, Some(&b2));
        let tanh = block.linear(&w3, Some(&b3)).gelu("tanh");
        // Not fused: a layer whose output is also returned; a sum of parallel branches (the other
        // layer reads an input the first one does not come from). Both still become nimble::linear.
        let shared = tanh.linear(&w4, Some(&b4));
        let parallel = xs[1].linear::<Tensor>(&w5, None) + shared.relu();
        vec![block, tanh, shared, parallel]
    };
    tch::manual_seed(6);
    let xs = vec![Tensor::randn([2, 5, 8], (Kind::Float, Device::Cpu)), Tensor::randn([2, 5, 8], (Kind::Float, Device::Cpu))];
    let expected = tch::no_grad(|| forward(&xs));
    let nimble = Nimble::from_fn(forward);
    let trace = nimble.trace(&xs, true).unwrap();
    let histogram = trace.op_histogram();
    assert_eq!(count(&trace, "nimble::linear"), 5, "{histogram:?}");
    assert_eq!(count(&trace, "aten::linear") + count(&trace, "aten::gelu"), 0, "{histogram:?}");
    assert_eq!((count(&trace, "aten::add"), count(&trace, "aten::relu")), (1, 1), "{histogram:?}");
    assert_same_outputs(&nimble.run_optimized(&xs).unwrap(), &expected, 1e-5);
    // Without the rewrites the layers stay ATen's.
    let plain = nimble.trace(&xs, false).unwrap();
    assert_eq!((count(&plain, "nimble::linear"), count(&plain, "aten::linear")), (0, 5), "{:?}", plain.op_histogram());
}

#[test]
fn every_attention_mask_goes_through_nimble_attention_mask_and_attention_computes_the_same() {
    tch::manual_seed(7);
    let opts = (Kind::Float, Device::Cpu);
    let causal = Tensor::ones([6, 6], opts).tril(0).to_kind(Kind::Bool);
    let additive = Tensor::randn([1, 1, 6, 6], opts);
    let forward = move |xs: &[Tensor]| {
        let (q, k, v) = (&xs[0], &xs[0] * 0.5, &xs[0] - 1.0);
        let attend = |q: &Tensor, mask: &Tensor| Tensor::scaled_dot_product_attention(q, &k, &v, Some(mask), 0.0, false, None, false);
        // A padding mask as transformers' BERT makes it under tracing: true everywhere here,
        // expanded along its last dimension (stride 0), which the fused kernels refuse.
        let padding = xs[1].ge(-100.0).expand([1, 1, 6, 6], false);
        let first = attend(q, &padding);
        let second = attend(&first, &padding);
        // A constant boolean mask; a contiguous additive mask (passed on as it is).
        let third = attend(&second, &causal);
        let fourth = attend(&third, &causal);
        vec![attend(&fourth, &additive)]
    };
    let xs = vec![Tensor::randn([1, 2, 6, 4], opts), Tensor::randn([1, 1, 6, 1], opts)];
    let expected = tch::no_grad(|| forward(&xs));
    let nimble = Nimble::from_fn(forward);
    let trace = nimble.trace(&xs, true).unwrap();
    let histogram = trace.op_histogram();
    assert_eq!(count(&trace, "nimble::attention_mask"), 5, "{histogram:?}");
    assert_eq!(count(&trace, "aten::scaled_dot_product_attention"), 5, "{histogram:?}");
    assert_same_outputs(&nimble.run_optimized(&xs).unwrap(), &expected, 1e-5);
}
