//! The inference rewrites for transformer blocks: linear layers become `nimble::linear` with
//! their activation or residual fused in (and only those), attention masks go through
//! `nimble::attention_mask` (which gives the fused kernels a mask they take), and the rewritten
//! forward computes what the model does: on CPU tensors (CI), and on CUDA in both of
//! `nimble::linear`'s ways, captured (skipped without a GPU, failing with `NIMBLE_REQUIRE_GPU=1`).

use std::rc::Rc;

use nimble_torch::{relative_error, set_linear_gemm, LinearGemm, Nimble, PrepareOptions, Trace};
use tch::{Device, Kind, Tensor};

mod common;

fn count(trace: &Trace, name: &str) -> usize {
    trace.ops.iter().filter(|op| op.name == name).count()
}

fn assert_same_outputs(got: &[Tensor], expected: &[Tensor], bound: f64, case: &str) {
    assert_eq!(got.len(), expected.len());
    for (i, (got, want)) in got.iter().zip(expected).enumerate() {
        let error = relative_error(got, want);
        assert!(error < bound, "{case}: output {i} differs from the model's by {error:.2e}");
    }
}

type Forward = Rc<dyn Fn(&[Tensor]) -> Vec<Tensor>>;

/// Five linear layers of `width` features (`hidden` inside the first two) with random weights on
/// `device`: three take their GELU or residual, two must stay alone; and a Conv1D layer (addmm). No two layers read the same
/// input, so the frozen graph's concatenation of such layers leaves them apart. Inputs: two of
/// `rows` × `width`.
fn linear_block(width: i64, hidden: i64, device: Device) -> Forward {
    let opts = (Kind::Float, device);
    // Weights scaled by 1/sqrt(fan-in), biases of order 1.
    let layer = |outputs: i64, inputs: i64| (Tensor::randn([outputs, inputs], opts) / (inputs as f64).sqrt(), Tensor::randn([outputs], opts));
    let (w1, b1) = layer(hidden, width);
    let (w2, b2) = layer(width, hidden);
    let (w3, b3) = layer(width, width);
    let (w4, b4) = layer(width, width);
    let (w5, _) = layer(width, width);
    let (w6, b6) = layer(width, width);
    let w6 = w6.tr().contiguous();
    Rc::new(move |xs: &[Tensor]| {
        // Fused: exact GELU; a residual the layer's input is computed from; tanh GELU.
        let hidden = xs[0].linear(&w1, Some(&b1)).gelu("none");
        let block = &xs[0] + hidden.linear(&w2, Some(&b2));
        let tanh = block.linear(&w3, Some(&b3)).gelu("tanh");
        // Not fused: a layer whose output is also returned; a sum of parallel branches (the other
        // layer reads an input the first one does not come from). Both still become nimble::linear.
        let shared = tanh.linear(&w4, Some(&b4));
        let parallel = xs[1].linear::<Tensor>(&w5, None) + shared.relu();
        // transformers' Conv1D (GPT-2): bias + x w, the weight stored inputs × outputs.
        let conv1d = b6.addmm(&xs[1].view([-1, xs[1].size()[2]]), &w6);
        vec![block, tanh, shared, parallel, conv1d]
    })
}

/// Attention over `xs[0]` (batch × heads × `tokens` × head size) with the masks transformers
/// makes: a padding mask built from `xs[1]` (1 × 1 × `tokens` × 1) and expanded along its last
/// dimension (stride 0, which the fused kernels refuse), a causal boolean one, and a contiguous
/// additive one.
fn masked_attention(tokens: i64, device: Device) -> Forward {
    let opts = (Kind::Float, device);
    let causal = Tensor::ones([tokens, tokens], opts).tril(0).to_kind(Kind::Bool);
    let additive = Tensor::randn([1, 1, tokens, tokens], opts);
    Rc::new(move |xs: &[Tensor]| {
        let (k, v) = (&xs[0] * 0.5, &xs[0] - 1.0);
        let attend = |q: &Tensor, mask: &Tensor| Tensor::scaled_dot_product_attention(q, &k, &v, Some(mask), 0.0, false, None, false);
        // True everywhere here, as BERT's is without padding.
        let padding = xs[1].ge(-100.0).expand([1, 1, tokens, tokens], false);
        let first = attend(&xs[0], &padding);
        let second = attend(&first, &padding);
        let third = attend(&second, &causal);
        vec![attend(&third, &additive)]
    })
}

fn inputs(shapes: &[&[i64]], device: Device) -> Vec<Tensor> {
    shapes.iter().map(|shape| Tensor::randn(*shape, (Kind::Float, device))).collect()
}

fn nimble_of(forward: &Forward) -> Nimble {
    let f = forward.clone();
    Nimble::from_fn(move |xs: &[Tensor]| f(xs))
}

#[test]
fn linear_layers_take_their_activation_or_residual_and_nothing_else_reads() {
    tch::manual_seed(5);
    let forward = linear_block(8, 16, Device::Cpu);
    let xs = inputs(&[&[2, 5, 8], &[2, 5, 8]], Device::Cpu);
    let expected = tch::no_grad(|| forward(&xs));
    let nimble = nimble_of(&forward);
    let trace = nimble.trace(&xs, true).unwrap();
    let histogram = trace.op_histogram();
    assert_eq!(count(&trace, "nimble::linear"), 6, "{histogram:?}");
    assert_eq!(count(&trace, "aten::linear") + count(&trace, "aten::gelu") + count(&trace, "aten::addmm"), 0, "{histogram:?}");
    assert_eq!((count(&trace, "aten::add"), count(&trace, "aten::relu")), (1, 1), "{histogram:?}");
    assert_same_outputs(&nimble.run_optimized(&xs).unwrap(), &expected, 1e-5, "cpu");
    // Without the rewrites the layers stay ATen's.
    let plain = nimble.trace(&xs, false).unwrap();
    assert_eq!((count(&plain, "nimble::linear"), count(&plain, "aten::linear"), count(&plain, "aten::addmm")), (0, 5, 1), "{:?}", plain.op_histogram());
}

#[test]
fn every_attention_mask_goes_through_nimble_attention_mask_and_attention_computes_the_same() {
    tch::manual_seed(7);
    let forward = masked_attention(6, Device::Cpu);
    let xs = inputs(&[&[1, 2, 6, 4], &[1, 1, 6, 1]], Device::Cpu);
    let expected = tch::no_grad(|| forward(&xs));
    let nimble = nimble_of(&forward);
    let trace = nimble.trace(&xs, true).unwrap();
    let histogram = trace.op_histogram();
    // The padding mask two attentions share is converted once; the second takes it through `to`.
    assert_eq!(count(&trace, "nimble::attention_mask"), 3, "{histogram:?}");
    assert_eq!(count(&trace, "aten::to"), 1, "{histogram:?}");
    assert_eq!(count(&trace, "aten::scaled_dot_product_attention"), 4, "{histogram:?}");
    assert_same_outputs(&nimble.run_optimized(&xs).unwrap(), &expected, 1e-5, "cpu");
}

#[test]
fn on_cuda_both_gemm_ways_and_the_converted_masks_match_the_model_captured() {
    let Some(_gpu) = common::gpu() else { return };
    let cuda = Device::Cuda(0);
    // Four features per row (the vectorized epilogue) and odd ones (the scalar one); 128 rows as
    // in BERT at 1×128 and a few.
    for (gemm, width, hidden, rows) in [
        (LinearGemm::Aten, 64, 256, 128),
        (LinearGemm::Plain, 64, 256, 128),
        (LinearGemm::Plain, 7, 13, 3),
        (LinearGemm::Timed, 64, 256, 128),
        (LinearGemm::Timed, 7, 13, 3),
    ] {
        let case = format!("{gemm:?} {rows}x{width} ({hidden} hidden)");
        set_linear_gemm(gemm).unwrap();
        tch::manual_seed(11);
        let forward = linear_block(width, hidden, cuda);
        let mut nimble = nimble_of(&forward);
        let report = nimble.prepare(&inputs(&[&[1, rows, width], &[1, rows, width]], cuda), PrepareOptions::inference()).unwrap().clone();
        assert_eq!(report.fused_ops, 6, "{case}: {report:?}");
        for _ in 0..3 {
            let xs = inputs(&[&[1, rows, width], &[1, rows, width]], cuda);
            let expected = tch::no_grad(|| forward(&xs));
            // Float32 without TF32 for matrix products (libtorch's default): only the order of
            // the sums differs.
            assert_same_outputs(&nimble.forward(&xs).unwrap(), &expected, 1e-4, &case);
        }
    }
    set_linear_gemm(LinearGemm::Timed).unwrap();
    tch::manual_seed(12);
    let forward = masked_attention(128, cuda);
    let mut nimble = nimble_of(&forward);
    nimble.prepare(&inputs(&[&[1, 12, 128, 64], &[1, 1, 128, 1]], cuda), PrepareOptions::inference()).unwrap();
    for _ in 0..3 {
        let xs = inputs(&[&[1, 12, 128, 64], &[1, 1, 128, 1]], cuda);
        let expected = tch::no_grad(|| forward(&xs));
        assert_same_outputs(&nimble.forward(&xs).unwrap(), &expected, 1e-4, "attention");
    }
}
