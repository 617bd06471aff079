//! MobileNetV2 as torchvision's `mobilenet_v2()` builds it (width 1.0).
//!
//! tch::vision's MobileNetV2 computes ReLU6 as two ops (ReLU, then clamp) and pools with two
//! means; this one issues torchvision's ops.

use tch::nn::{ModuleT, Path};
use tch::Tensor;

use super::layers::{batch_norm, run_all, Act, Classifier, Conv, ConvBn};

const EPS: f64 = 1e-5;

/// (expansion t, output channels c, repeats n, first stride s), torchvision's table.
const SETTINGS: [(i64, i64, i64, i64); 7] = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)];

#[derive(Debug)]
struct InvertedResidual {
    convs: Vec<ConvBn>,
    project: tch::nn::Conv2D,
    project_bn: tch::nn::BatchNorm,
    residual: bool,
}

impl InvertedResidual {
    fn new(p: &Path, cin: i64, cout: i64, stride: i64, expand: i64) -> Self {
        let hidden = cin * expand;
        let p = p / "conv";
        let mut convs = Vec::new();
        if expand != 1 {
            convs.push(ConvBn::sequential(&(&p / convs.len()), cin, hidden, Conv::square(1), EPS, Act::Relu6));
        }
        let depthwise = Conv::square(3).stride(stride).same().groups(hidden);
        convs.push(ConvBn::sequential(&(&p / convs.len()), hidden, hidden, depthwise, EPS, Act::Relu6));
        let at = convs.len() as i64;
        InvertedResidual {
            convs,
            project: Conv::square(1).build(&p / at, hidden, cout),
            project_bn: batch_norm(&p / (at + 1), cout, EPS),
            residual: stride == 1 && cin == cout,
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let y = run_all(&self.convs, x, train);
        let y = y.apply(&self.project).apply_t(&self.project_bn, train);
        if self.residual {
            x + y
        } else {
            y
        }
    }
}

/// MobileNetV2 (224×224 inputs for ImageNet).
#[derive(Debug)]
pub struct MobileNetV2 {
    stem: ConvBn,
    blocks: Vec<InvertedResidual>,
    last: ConvBn,
    head: Classifier,
}

impl MobileNetV2 {
    pub fn new(p: &Path, classes: i64) -> Self {
        let features = p / "features";
        let stem = ConvBn::sequential(&(&features / 0), 3, 32, Conv::square(3).stride(2).same(), EPS, Act::Relu6);
        let mut blocks = Vec::new();
        let mut cin = 32;
        for (t, c, n, s) in SETTINGS {
            for i in 0..n {
                let stride = if i == 0 { s } else { 1 };
                blocks.push(InvertedResidual::new(&(&features / (blocks.len() + 1)), cin, c, stride, t));
                cin = c;
            }
        }
        let last = ConvBn::sequential(&(&features / (blocks.len() + 1)), cin, 1280, Conv::square(1), EPS, Act::Relu6);
        MobileNetV2 { stem, blocks, last, head: Classifier::new(p / "classifier" / 1, 0.2, 1280, classes) }
    }
}

impl ModuleT for MobileNetV2 {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let x = self.stem.forward_t(x, train);
        let x = self.blocks.iter().fold(x, |x, block| block.forward_t(&x, train));
        let x = self.last.forward_t(&x, train);
        self.head.forward_t(&x.adaptive_avg_pool2d([1, 1]).flatten(1, -1), train)
    }
}
