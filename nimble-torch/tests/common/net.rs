//! A small CIFAR-shaped network for the training tests.

use tch::nn::{self, ModuleT};
use tch::Tensor;

/// A small CIFAR-shaped network with BatchNorm, two parallel branches (so the forward plan has
/// two streams) and optional dropout.
#[derive(Debug)]
pub struct Net {
    stem: nn::Conv2D,
    stem_bn: nn::BatchNorm,
    left: nn::Conv2D,
    left_bn: nn::BatchNorm,
    right: nn::Conv2D,
    right_bn: nn::BatchNorm,
    fc: nn::Linear,
    dropout: f64,
}

impl Net {
    pub fn new(p: &nn::Path, dropout: f64) -> Net {
        let conv = |name: &str, cin, cout, k| nn::conv2d(p / name, cin, cout, k, nn::ConvConfig { padding: k / 2, bias: false, ..Default::default() });
        Net {
            stem: conv("stem", 3, 16, 3),
            stem_bn: nn::batch_norm2d(p / "stem_bn", 16, Default::default()),
            left: conv("left", 16, 32, 3),
            left_bn: nn::batch_norm2d(p / "left_bn", 32, Default::default()),
            right: conv("right", 16, 32, 1),
            right_bn: nn::batch_norm2d(p / "right_bn", 32, Default::default()),
            fc: nn::linear(p / "fc", 32, 10, Default::default()),
            dropout,
        }
    }
}

impl ModuleT for Net {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let y = x.apply(&self.stem).apply_t(&self.stem_bn, train).relu();
        let a = y.apply(&self.left).apply_t(&self.left_bn, train).relu();
        let b = y.apply(&self.right).apply_t(&self.right_bn, train).relu();
        (a + b).adaptive_avg_pool2d([1, 1]).flatten(1, -1).dropout(self.dropout, train).apply(&self.fc)
    }
}
