//! The inference rewrites' convolution+ReLU on CUDA: cuDNN's fused grouped convolution(+add)+ReLU
//! ops (PyTorch's FuseFrozenConvAddRelu) become `nimble::conv2d_relu`, which times cuDNN's fused
//! kernels against the convolution with Nimble's epilogue kernel and keeps the faster; the
//! others stay cuDNN's. Each way,
//! and the timed choice, must compute what the model does, in both layouts, captured. Skipped
//! without a GPU (cuDNN's fusion is CUDA-only); fails instead with `NIMBLE_REQUIRE_GPU=1`.

use std::rc::Rc;

use nimble_torch::{relative_error, set_conv_relu, ConvRelu, Nimble, PrepareOptions};
use tch::{Device, Kind, Tensor};

mod common;

const CUDA: Device = Device::Cuda(0);

type Forward = Rc<dyn Fn(&[Tensor]) -> Vec<Tensor>>;

/// Four grouped convolutions followed by a ReLU: with a bias, without one, depthwise, and with a
/// residual added before the ReLU; one that is not grouped (it stays cuDNN's); and one that must
/// stay unfused (its output is also returned), in `kind`. Inputs: x (`batch` × 16 × h × w) and a residual of the convolutions' output shape.
fn conv_relu_block(kind: Kind) -> Forward {
    tch::manual_seed(21);
    let opts = (kind, CUDA);
    let weights = |shape: [i64; 4]| Tensor::randn(shape, opts) / ((shape[1] * shape[2] * shape[3]) as f64).sqrt();
    let (w1, b1) = (weights([16, 8, 3, 3]), Tensor::randn([16], opts));
    let w2 = weights([16, 4, 1, 1]);
    let (w3, b3) = (weights([16, 1, 3, 3]), Tensor::randn([16], opts));
    let (w4, b4) = (weights([16, 8, 3, 3]), Tensor::randn([16], opts));
    let (w5, b5) = (weights([16, 16, 3, 3]), Tensor::randn([16], opts));
    let (w6, b6) = (weights([16, 16, 1, 1]), Tensor::randn([16], opts));
    Rc::new(move |xs: &[Tensor]| {
        let x = &xs[0];
        let biased = x.conv2d(&w1, Some(&b1), [1, 1], [1, 1], [1, 1], 2).relu();
        let unbiased = biased.conv2d::<Tensor>(&w2, None, [1, 1], [0, 0], [1, 1], 4).relu();
        let depthwise = unbiased.conv2d(&w3, Some(&b3), [1, 1], [1, 1], [1, 1], 16).relu();
        let residual = (depthwise.conv2d(&w4, Some(&b4), [1, 1], [1, 1], [1, 1], 2) + &xs[1]).relu();
        let plain = residual.conv2d(&w5, Some(&b5), [1, 1], [1, 1], [1, 1], 1).relu();
        let shared = plain.conv2d(&w6, Some(&b6), [1, 1], [0, 0], [1, 1], 1);
        vec![residual, shared.relu(), shared]
    })
}

fn inputs(kind: Kind, batch: i64, h: i64, w: i64, channels_last: bool) -> Vec<Tensor> {
    let x = Tensor::randn([batch, 16, h, w], (kind, CUDA));
    let x = if channels_last { x.permute([0, 2, 3, 1]).contiguous().permute([0, 3, 1, 2]) } else { x };
    vec![x, Tensor::randn([batch, 16, h, w], (kind, CUDA))]
}

#[test]
fn conv_relu_matches_the_model_in_each_way_and_layout_captured() {
    let Some(_gpu) = common::gpu() else { return };
    // bfloat16: the epilogue way takes ATen's ops for the bias, residual and ReLU.
    let cases = [(Kind::Float, 2, 14, 14, false), (Kind::Float, 1, 9, 7, true), (Kind::Float, 3, 28, 28, true), (Kind::BFloat16, 2, 14, 14, true)];
    for way in [ConvRelu::Cudnn, ConvRelu::Epilogue, ConvRelu::Timed] {
        for (kind, batch, h, w, channels_last) in cases {
            let forward = conv_relu_block(kind);
            let inputs = |channels_last| inputs(kind, batch, h, w, channels_last);
            let case = format!("{way:?} {kind:?} {batch}x16x{h}x{w}{}", if channels_last { " channels-last" } else { "" });
            set_conv_relu(way).unwrap();
            let f = forward.clone();
            let mut nimble = Nimble::from_fn(move |xs: &[Tensor]| f(xs));
            let report = nimble.prepare(&inputs(channels_last), PrepareOptions::inference().channels_last(Some(channels_last))).unwrap().clone();
            let kinds = nimble.optimized_node_kinds().unwrap().unwrap();
            let count = |kind: &str| kinds.iter().find(|(k, _)| k == kind).map_or(0, |(_, n)| *n);
            assert_eq!(count("nimble::conv2d_relu"), 4, "{case}: {kinds:?}");
            assert_eq!(count("aten::cudnn_convolution_relu") + count("aten::cudnn_convolution_add_relu"), 1, "{case}: {kinds:?}");
            assert_eq!(report.channels_last, channels_last, "{case}: {report:?}");
            for _ in 0..3 {
                let xs = inputs(channels_last);
                let expected = tch::no_grad(|| forward(&xs));
                let got = nimble.forward(&xs).unwrap();
                for (i, want) in expected.iter().enumerate() {
                    // TF32 convolutions (libtorch's default for cuDNN), whose algorithms the
                    // benchmark mode picks per run: up to about 1e-3 apart; bfloat16 rounds each
                    // step to 8 bits. A wrong epilogue is off by order 1.
                    let bound = if kind == Kind::Float { 2e-3 } else { 3e-2 };
                    let error = relative_error(&got[i], want);
                    assert!(error <= bound, "{case}: output {i} differs from the model's by {error:.2e}");
                }
            }
        }
    }
    set_conv_relu(ConvRelu::Timed).unwrap();
}
