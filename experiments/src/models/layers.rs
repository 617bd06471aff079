//! Building blocks shared by the hand-written models.
//!
//! Parameters are initialised as PyTorch's modules do by default (convolution and linear
//! weights Kaiming-uniform, batch-norm scale 1 and shift 0), and every variable is named as in
//! the reference model's `state_dict`, so weights exported from PyTorch load unchanged.

use tch::nn::{self, ConvConfigND, ModuleT, Path};
use tch::Tensor;

/// A 2-D convolution's settings (square or rectangular kernel).
#[derive(Clone, Copy, Debug)]
pub struct Conv {
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: i64,
    pub groups: i64,
    pub bias: bool,
}

impl Conv {
    /// A `k`×`k` convolution, stride 1, no padding, no bias.
    pub fn square(k: i64) -> Self {
        Self::rect(k, k)
    }

    /// A `kh`×`kw` convolution, stride 1, no padding, no bias.
    pub fn rect(kh: i64, kw: i64) -> Self {
        Conv { kernel: [kh, kw], stride: [1, 1], padding: [0, 0], dilation: 1, groups: 1, bias: false }
    }

    pub fn stride(mut self, s: i64) -> Self {
        self.stride = [s, s];
        self
    }

    pub fn strides(mut self, sh: i64, sw: i64) -> Self {
        self.stride = [sh, sw];
        self
    }

    pub fn pad(mut self, p: i64) -> Self {
        self.padding = [p, p];
        self
    }

    pub fn pads(mut self, ph: i64, pw: i64) -> Self {
        self.padding = [ph, pw];
        self
    }

    /// Padding that keeps the size at stride 1: `(k - 1) / 2 * dilation`, as torchvision's
    /// `Conv2dNormActivation` computes it.
    pub fn same(mut self) -> Self {
        self.padding = [(self.kernel[0] - 1) / 2 * self.dilation, (self.kernel[1] - 1) / 2 * self.dilation];
        self
    }

    pub fn dilation(mut self, d: i64) -> Self {
        self.dilation = d;
        self
    }

    pub fn groups(mut self, g: i64) -> Self {
        self.groups = g;
        self
    }

    pub fn bias(mut self) -> Self {
        self.bias = true;
        self
    }

    /// The layer, with its variables under `p` (`p.weight`, `p.bias`).
    pub fn build(self, p: Path, cin: i64, cout: i64) -> nn::Conv2D {
        let config = ConvConfigND::<[i64; 2]> {
            stride: self.stride,
            padding: self.padding,
            dilation: [self.dilation, self.dilation],
            groups: self.groups,
            bias: self.bias,
            ..Default::default()
        };
        nn::conv(p, cin, cout, self.kernel, config)
    }
}

/// Batch normalisation over channels with PyTorch's initial values.
pub fn batch_norm(p: Path, channels: i64, eps: f64) -> nn::BatchNorm {
    nn::batch_norm2d(p, channels, nn::BatchNormConfig { eps, ws_init: nn::Init::Const(1.0), ..Default::default() })
}

/// The activation after a convolution and its normalisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    None,
    Relu,
    Relu6,
    Silu,
}

impl Act {
    pub fn apply(self, x: Tensor) -> Tensor {
        match self {
            Act::None => x,
            Act::Relu => x.relu(),
            Act::Relu6 => x.relu6(),
            Act::Silu => x.silu(),
        }
    }
}

/// Convolution, batch norm, activation: torchvision's `Conv2dNormActivation` and `BasicConv2d`.
#[derive(Debug)]
pub struct ConvBn {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
    act: Act,
}

impl ConvBn {
    /// Variables named `conv_name.weight` and `bn_name.*` under `p`.
    #[allow(clippy::too_many_arguments)]
    pub fn named(p: &Path, conv_name: &str, bn_name: &str, cin: i64, cout: i64, conv: Conv, eps: f64, act: Act) -> Self {
        ConvBn { conv: conv.build(p / conv_name, cin, cout), bn: batch_norm(p / bn_name, cout, eps), act }
    }

    /// torchvision's `Conv2dNormActivation`: the convolution is `p.0`, the norm `p.1`.
    pub fn sequential(p: &Path, cin: i64, cout: i64, conv: Conv, eps: f64, act: Act) -> Self {
        Self::named(p, "0", "1", cin, cout, conv, eps, act)
    }
}

/// Runs `layers` in order.
pub fn run_all(layers: &[ConvBn], x: &Tensor, train: bool) -> Tensor {
    layers.iter().fold(x.shallow_clone(), |x, layer| layer.forward_t(&x, train))
}

impl ModuleT for ConvBn {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        self.act.apply(x.apply(&self.conv).apply_t(&self.bn, train))
    }
}

/// The classifier head shared by most models: dropout, then a linear layer.
#[derive(Debug)]
pub struct Classifier {
    dropout: f64,
    linear: nn::Linear,
}

impl Classifier {
    pub fn new(p: Path, dropout: f64, cin: i64, classes: i64) -> Self {
        Classifier { dropout, linear: nn::linear(p, cin, classes, Default::default()) }
    }

    pub fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        x.dropout(self.dropout, train).apply(&self.linear)
    }
}

/// Removes the first row and column (`x[:, :, 1:, 1:]`), as NASNet's padded branches and the
/// shifted path of the factorized reductions do.
pub fn crop_top_left(x: &Tensor) -> Tensor {
    x.slice(2, 1, None, 1).slice(3, 1, None, 1)
}

/// A 3×3 average pool that does not count padding, as the NAS cells use.
pub fn avg_pool_3x3(x: &Tensor, stride: i64) -> Tensor {
    x.avg_pool2d([3, 3], [stride, stride], [1, 1], false, false, None::<i64>)
}

/// A 3×3 max pool with padding 1.
pub fn max_pool_3x3(x: &Tensor, stride: i64) -> Tensor {
    x.max_pool2d([3, 3], [stride, stride], [1, 1], [1, 1], false)
}
