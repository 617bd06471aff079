//! The inference rewrites on in-place activations (torchvision's `inplace=True` modules): made
//! functional where nothing else sees the mutation, they join the fused ops like their
//! functional forms; a mutation something else sees stays, in-place ReLU stays, and the forward
//! computes the same.

use nimble_torch::{relative_error, Nimble, Trace};
use tch::{Device, Kind, Tensor};

fn count(trace: &Trace, name: &str) -> usize {
    trace.ops.iter().filter(|op| op.name == name).count()
}

#[test]
fn in_place_activations_are_fused_unless_their_mutation_is_seen() {
    tch::manual_seed(9);
    let opts = (Kind::Float, Device::Cpu);
    let weights = |shape: [i64; 4]| Tensor::randn(shape, opts) / ((shape[1] * shape[2] * shape[3]) as f64).sqrt();
    let (c1, c2, c3) = (weights([8, 4, 3, 3]), weights([8, 8, 3, 3]), weights([8, 8, 3, 3]));
    let (w1, w2) = (weights([2, 8, 1, 1]), weights([8, 2, 1, 1]));
    let forward = move |xs: &[Tensor]| {
        // An EfficientNet block as torchvision writes it: SiLU(inplace=True) after the
        // convolution and inside squeeze-and-excitation, whose gate multiplies the input.
        let mut y = xs[0].conv2d::<Tensor>(&c1, None, [1, 1], [1, 1], [1, 1], 1);
        let _ = y.silu_();
        let mut hidden = y.adaptive_avg_pool2d([1, 1]).conv2d::<Tensor>(&w1, None, [1, 1], [0, 0], [1, 1], 1);
        let _ = hidden.silu_();
        let gate = hidden.conv2d::<Tensor>(&w2, None, [1, 1], [0, 0], [1, 1], 1).sigmoid();
        let excited = &y * gate;
        // Seen: a view of the convolution's output, taken before the in-place SiLU, is
        // returned (and holds the activated values), so the SiLU stays and nothing is fused.
        let mut seen = excited.conv2d::<Tensor>(&c2, None, [1, 1], [1, 1], [1, 1], 1);
        let flat = seen.view([-1]);
        let activated = seen.silu_();
        // In-place ReLU stays as it is (see ns_jit_optimize).
        let mut last = activated.conv2d::<Tensor>(&c3, None, [1, 1], [1, 1], [1, 1], 1);
        let _ = last.relu_();
        vec![flat, last]
    };
    let xs = vec![Tensor::randn([2, 4, 9, 7], opts)];
    let expected = tch::no_grad(|| forward(&xs));
    let nimble = Nimble::from_fn(forward);
    let trace = nimble.trace(&xs, true).unwrap();
    let histogram = trace.op_histogram();
    assert_eq!(count(&trace, "nimble::squeeze_excite"), 1, "{histogram:?}");
    assert_eq!(count(&trace, "nimble::conv2d_fused"), 1, "{histogram:?}");
    assert_eq!((count(&trace, "aten::silu_"), count(&trace, "aten::relu_")), (1, 1), "{histogram:?}");
    let got = nimble.run_optimized(&xs).unwrap();
    for (i, (got, want)) in got.iter().zip(&expected).enumerate() {
        let error = relative_error(got, want);
        assert!(error < 1e-5, "output {i} differs from the model's by {error:.2e}");
    }
}
