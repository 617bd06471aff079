//! EfficientNet-B0…B7 as torchvision's `efficientnet_bN()` builds them.
//!
//! tch::vision's EfficientNet pads TensorFlow-style ("same" padding, asymmetric at stride 2)
//! with an explicit pad before 17 convolutions and computes SiLU as `x * sigmoid(x)`; that is a
//! different network from torchvision's, so it is not used here.

use tch::nn::{self, ModuleT, Path};
use tch::Tensor;

use super::layers::{Act, Classifier, Conv, ConvBn};

/// (expansion, kernel, stride, input channels, output channels, layers) of B0, torchvision's
/// table; the other sizes scale channels and layers.
const BASE: [(i64, i64, i64, i64, i64, i64); 7] =
    [(1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1)];

/// One EfficientNet size: width and depth multipliers, dropout, batch-norm epsilon.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub width: f64,
    pub depth: f64,
    pub dropout: f64,
    pub eps: f64,
}

impl Scale {
    /// torchvision's settings for B0…B7 (B5 and larger use eps 0.001).
    pub fn b(n: u8) -> Option<Scale> {
        let (width, depth, dropout) = match n {
            0 => (1.0, 1.0, 0.2),
            1 => (1.0, 1.1, 0.2),
            2 => (1.1, 1.2, 0.3),
            3 => (1.2, 1.4, 0.3),
            4 => (1.4, 1.8, 0.4),
            5 => (1.6, 2.2, 0.4),
            6 => (1.8, 2.6, 0.5),
            7 => (2.0, 3.1, 0.5),
            _ => return None,
        };
        Some(Scale { width, depth, dropout, eps: if n >= 5 { 1e-3 } else { 1e-5 } })
    }

    fn channels(&self, c: i64) -> i64 {
        make_divisible(c as f64 * self.width, 8)
    }

    fn layers(&self, n: i64) -> i64 {
        (n as f64 * self.depth).ceil() as i64
    }
}

/// torchvision's `_make_divisible`: round to a multiple of `divisor`, never more than 10% down.
fn make_divisible(v: f64, divisor: i64) -> i64 {
    let rounded = ((v + divisor as f64 / 2.0) as i64 / divisor * divisor).max(divisor);
    if (rounded as f64) < 0.9 * v {
        rounded + divisor
    } else {
        rounded
    }
}

/// Squeeze-and-excitation: average pool, two 1×1 convolutions (SiLU, then sigmoid), scale.
#[derive(Debug)]
struct SqueezeExcitation {
    fc1: nn::Conv2D,
    fc2: nn::Conv2D,
}

impl SqueezeExcitation {
    fn new(p: &Path, channels: i64, squeeze: i64) -> Self {
        SqueezeExcitation { fc1: Conv::square(1).bias().build(p / "fc1", channels, squeeze), fc2: Conv::square(1).bias().build(p / "fc2", squeeze, channels) }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let scale = x.adaptive_avg_pool2d([1, 1]).apply(&self.fc1).silu().apply(&self.fc2).sigmoid();
        scale * x
    }
}

#[derive(Debug)]
struct MbConv {
    expand: Option<ConvBn>,
    depthwise: ConvBn,
    se: SqueezeExcitation,
    project: ConvBn,
    residual: bool,
}

impl MbConv {
    #[allow(clippy::too_many_arguments)]
    fn new(p: &Path, cin: i64, cout: i64, expand_ratio: i64, kernel: i64, stride: i64, eps: f64) -> Self {
        let p = p / "block";
        let expanded = make_divisible((cin * expand_ratio) as f64, 8);
        let mut at = 0;
        let mut next = || {
            at += 1;
            &p / (at - 1)
        };
        let expand = (expanded != cin).then(|| ConvBn::sequential(&next(), cin, expanded, Conv::square(1), eps, Act::Silu));
        let depthwise = ConvBn::sequential(&next(), expanded, expanded, Conv::square(kernel).stride(stride).same().groups(expanded), eps, Act::Silu);
        let se = SqueezeExcitation::new(&next(), expanded, (cin / 4).max(1));
        let project = ConvBn::sequential(&next(), expanded, cout, Conv::square(1), eps, Act::None);
        MbConv { expand, depthwise, se, project, residual: stride == 1 && cin == cout }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let y = match &self.expand {
            Some(expand) => expand.forward_t(x, train),
            None => x.shallow_clone(),
        };
        let y = self.project.forward_t(&self.se.forward(&self.depthwise.forward_t(&y, train)), train);
        // Stochastic depth is the identity in evaluation; Nimble's experiments keep it off.
        if self.residual {
            y + x
        } else {
            y
        }
    }
}

/// An EfficientNet.
#[derive(Debug)]
pub struct EfficientNet {
    stem: ConvBn,
    blocks: Vec<MbConv>,
    last: ConvBn,
    head: Classifier,
}

impl EfficientNet {
    pub fn new(p: &Path, scale: Scale, classes: i64) -> Self {
        let features = p / "features";
        let eps = scale.eps;
        let first = scale.channels(BASE[0].3);
        let stem = ConvBn::sequential(&(&features / 0), 3, first, Conv::square(3).stride(2).same(), eps, Act::Silu);
        let mut blocks = Vec::new();
        let mut cin = first;
        for (stage, &(expand, kernel, stride, _, cout, layers)) in BASE.iter().enumerate() {
            let cout = scale.channels(cout);
            let stage_path = &features / (stage + 1);
            for i in 0..scale.layers(layers) {
                let stride = if i == 0 { stride } else { 1 };
                blocks.push(MbConv::new(&(&stage_path / i), cin, cout, expand, kernel, stride, eps));
                cin = cout;
            }
        }
        let last_channels = 4 * cin;
        let last = ConvBn::sequential(&(&features / (BASE.len() + 1)), cin, last_channels, Conv::square(1), eps, Act::Silu);
        EfficientNet { stem, blocks, last, head: Classifier::new(p / "classifier" / 1, scale.dropout, last_channels, classes) }
    }
}

impl ModuleT for EfficientNet {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let x = self.stem.forward_t(x, train);
        let x = self.blocks.iter().fold(x, |x, block| block.forward_t(&x, train));
        let x = self.last.forward_t(&x, train);
        self.head.forward_t(&x.adaptive_avg_pool2d([1, 1]).flatten(1, -1), train)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_rounding_matches_torchvision() {
        // B5 widens by 1.6: 32 -> 48 (51.2 rounds down to 48, within 10%), 16 -> 24, 320 -> 512.
        let b5 = Scale::b(5).unwrap();
        assert_eq!((b5.channels(32), b5.channels(16), b5.channels(320)), (48, 24, 512));
        assert_eq!(b5.layers(3), 7);
        assert_eq!(make_divisible(3.0, 8), 8);
        assert!(Scale::b(8).is_none());
    }
}
