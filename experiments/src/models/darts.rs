//! DARTS and AmoebaNet as the DARTS authors' `NetworkImageNet` builds them (C = 48, 14 cells,
//! no auxiliary head), from the genotypes `DARTS_V2` and `AmoebaNet` of their
//! `genotypes.py`. Drop-path is off (the paper measured evaluation; training here keeps it
//! off too).

use tch::nn::{self, ModuleT, Path};
use tch::Tensor;

use super::layers::{avg_pool_3x3, batch_norm, crop_top_left, max_pool_3x3, Conv};

const EPS: f64 = 1e-5;

/// A cell's candidate operations, by the genotype's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Primitive {
    MaxPool3,
    AvgPool3,
    Skip,
    SepConv3,
    SepConv5,
    SepConv7,
    DilConv3,
    DilConv5,
    Conv7x1_1x7,
}

/// A searched cell: for each step, two (operation, input state) pairs, and the states
/// concatenated into the output.
#[derive(Clone, Copy, Debug)]
pub struct Genotype {
    pub normal: &'static [(Primitive, usize)],
    pub normal_concat: &'static [usize],
    pub reduce: &'static [(Primitive, usize)],
    pub reduce_concat: &'static [usize],
}

use Primitive::*;

/// `DARTS_V2` (the DARTS paper's ImageNet network).
pub const DARTS_V2: Genotype = Genotype {
    normal: &[(SepConv3, 0), (SepConv3, 1), (SepConv3, 0), (SepConv3, 1), (SepConv3, 1), (Skip, 0), (Skip, 0), (DilConv3, 2)],
    normal_concat: &[2, 3, 4, 5],
    reduce: &[(MaxPool3, 0), (MaxPool3, 1), (Skip, 2), (MaxPool3, 1), (MaxPool3, 0), (Skip, 2), (Skip, 2), (MaxPool3, 1)],
    reduce_concat: &[2, 3, 4, 5],
};

/// `AmoebaNet` (AmoebaNet-A's cells as the DARTS code transcribes them).
pub const AMOEBA: Genotype = Genotype {
    normal: &[(AvgPool3, 0), (MaxPool3, 1), (SepConv3, 0), (SepConv5, 2), (SepConv3, 0), (AvgPool3, 3), (SepConv3, 1), (Skip, 1), (Skip, 0), (AvgPool3, 1)],
    normal_concat: &[4, 5, 6],
    reduce: &[(AvgPool3, 0), (SepConv3, 1), (MaxPool3, 0), (SepConv7, 2), (SepConv7, 0), (AvgPool3, 1), (MaxPool3, 0), (MaxPool3, 1), (Conv7x1_1x7, 0), (SepConv3, 5)],
    reduce_concat: &[3, 4, 6],
};

/// A layer list run in order, numbered as the reference's `nn.Sequential` (ReLUs take an
/// index too), so variable names match.
#[derive(Debug)]
enum Layer {
    Relu,
    Conv(nn::Conv2D),
    Bn(nn::BatchNorm),
}

#[derive(Debug, Default)]
struct Sequential(Vec<Layer>);

impl Sequential {
    fn relu(mut self) -> Self {
        self.0.push(Layer::Relu);
        self
    }

    fn conv(mut self, p: &Path, conv: Conv, cin: i64, cout: i64) -> Self {
        let at = self.0.len();
        self.0.push(Layer::Conv(conv.build(p / at, cin, cout)));
        self
    }

    fn bn(mut self, p: &Path, c: i64) -> Self {
        let at = self.0.len();
        self.0.push(Layer::Bn(batch_norm(p / at, c, EPS)));
        self
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        self.0.iter().fold(x.shallow_clone(), |x, layer| match layer {
            Layer::Relu => x.relu(),
            Layer::Conv(conv) => x.apply(conv),
            Layer::Bn(bn) => x.apply_t(bn, train),
        })
    }
}

/// `ReLUConvBN` (a 1×1 here), `SepConv` and `DilConv`: all under `p.op`.
fn relu_conv_bn(p: &Path, cin: i64, cout: i64) -> Sequential {
    let p = p / "op";
    Sequential::default().relu().conv(&p, Conv::square(1), cin, cout).bn(&p, cout)
}

fn sep_conv(p: &Path, c: i64, kernel: i64, stride: i64) -> Sequential {
    let p = p / "op";
    let pad = kernel / 2;
    Sequential::default()
        .relu()
        .conv(&p, Conv::square(kernel).stride(stride).pad(pad).groups(c), c, c)
        .conv(&p, Conv::square(1), c, c)
        .bn(&p, c)
        .relu()
        .conv(&p, Conv::square(kernel).pad(pad).groups(c), c, c)
        .conv(&p, Conv::square(1), c, c)
        .bn(&p, c)
}

fn dil_conv(p: &Path, c: i64, kernel: i64, stride: i64) -> Sequential {
    let p = p / "op";
    Sequential::default().relu().conv(&p, Conv::square(kernel).stride(stride).pad(kernel - 1).dilation(2).groups(c), c, c).conv(&p, Conv::square(1), c, c).bn(&p, c)
}

/// `FactorizedReduce`: two stride-2 1×1 convolutions, the second shifted by one pixel.
#[derive(Debug)]
struct FactorizedReduce {
    conv1: nn::Conv2D,
    conv2: nn::Conv2D,
    bn: nn::BatchNorm,
}

impl FactorizedReduce {
    fn new(p: &Path, cin: i64, cout: i64) -> Self {
        FactorizedReduce {
            conv1: Conv::square(1).stride(2).build(p / "conv_1", cin, cout / 2),
            conv2: Conv::square(1).stride(2).build(p / "conv_2", cin, cout / 2),
            bn: batch_norm(p / "bn", cout, EPS),
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let x = x.relu();
        let shifted = crop_top_left(&x);
        Tensor::cat(&[x.apply(&self.conv1), shifted.apply(&self.conv2)], 1).apply_t(&self.bn, train)
    }
}

#[derive(Debug)]
enum Op {
    Identity,
    MaxPool(i64),
    AvgPool(i64),
    Layers(Sequential),
    Reduce(Box<FactorizedReduce>),
}

impl Op {
    fn new(p: &Path, primitive: Primitive, c: i64, stride: i64) -> Self {
        match primitive {
            MaxPool3 => Op::MaxPool(stride),
            AvgPool3 => Op::AvgPool(stride),
            Skip if stride == 1 => Op::Identity,
            Skip => Op::Reduce(Box::new(FactorizedReduce::new(p, c, c))),
            SepConv3 => Op::Layers(sep_conv(p, c, 3, stride)),
            SepConv5 => Op::Layers(sep_conv(p, c, 5, stride)),
            SepConv7 => Op::Layers(sep_conv(p, c, 7, stride)),
            DilConv3 => Op::Layers(dil_conv(p, c, 3, stride)),
            DilConv5 => Op::Layers(dil_conv(p, c, 5, stride)),
            Conv7x1_1x7 => {
                let s = Sequential::default().relu();
                let s = s.conv(p, Conv::rect(1, 7).strides(1, stride).pads(0, 3), c, c);
                let s = s.conv(p, Conv::rect(7, 1).strides(stride, 1).pads(3, 0), c, c);
                Op::Layers(s.bn(p, c))
            }
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        match self {
            Op::Identity => x.shallow_clone(),
            Op::MaxPool(stride) => max_pool_3x3(x, *stride),
            Op::AvgPool(stride) => avg_pool_3x3(x, *stride),
            Op::Layers(layers) => layers.forward_t(x, train),
            Op::Reduce(reduce) => reduce.forward_t(x, train),
        }
    }
}

#[derive(Debug)]
struct Cell {
    pre0: Result<FactorizedReduce, Sequential>,
    pre1: Sequential,
    ops: Vec<(Op, usize)>,
    concat: &'static [usize],
}

impl Cell {
    #[allow(clippy::too_many_arguments)]
    fn new(p: &Path, genotype: &Genotype, c_prev_prev: i64, c_prev: i64, c: i64, reduction: bool, reduction_prev: bool) -> Self {
        let pre0 = if reduction_prev { Ok(FactorizedReduce::new(&(p / "preprocess0"), c_prev_prev, c)) } else { Err(relu_conv_bn(&(p / "preprocess0"), c_prev_prev, c)) };
        let (steps, concat) = if reduction { (genotype.reduce, genotype.reduce_concat) } else { (genotype.normal, genotype.normal_concat) };
        let ops_path = p / "_ops";
        let ops = steps
            .iter()
            .enumerate()
            .map(|(k, &(primitive, input))| {
                let stride = if reduction && input < 2 { 2 } else { 1 };
                (Op::new(&(&ops_path / k), primitive, c, stride), input)
            })
            .collect();
        Cell { pre0, pre1: relu_conv_bn(&(p / "preprocess1"), c_prev, c), ops, concat }
    }

    fn forward_t(&self, s0: &Tensor, s1: &Tensor, train: bool) -> Tensor {
        let s0 = match &self.pre0 {
            Ok(reduce) => reduce.forward_t(s0, train),
            Err(layers) => layers.forward_t(s0, train),
        };
        let mut states = vec![s0, self.pre1.forward_t(s1, train)];
        for pair in self.ops.chunks(2) {
            let h1 = pair[0].0.forward_t(&states[pair[0].1], train);
            let h2 = pair[1].0.forward_t(&states[pair[1].1], train);
            states.push(h1 + h2);
        }
        Tensor::cat(&self.concat.iter().map(|&i| &states[i]).collect::<Vec<_>>(), 1)
    }
}

/// `NetworkImageNet` (224×224 inputs).
#[derive(Debug)]
pub struct NetworkImageNet {
    stem0: Sequential,
    stem1: Sequential,
    cells: Vec<Cell>,
    classifier: nn::Linear,
}

impl NetworkImageNet {
    /// `c` initial channels, `layers` cells; reductions at a third and two thirds.
    pub fn new(p: &Path, genotype: &Genotype, c: i64, layers: usize, classes: i64) -> Self {
        let s0 = p / "stem0";
        let stem0 = Sequential::default()
            .conv(&s0, Conv::square(3).stride(2).pad(1), 3, c / 2)
            .bn(&s0, c / 2)
            .relu()
            .conv(&s0, Conv::square(3).stride(2).pad(1), c / 2, c)
            .bn(&s0, c);
        let s1 = p / "stem1";
        let stem1 = Sequential::default().relu().conv(&s1, Conv::square(3).stride(2).pad(1), c, c).bn(&s1, c);
        let (mut c_prev_prev, mut c_prev, mut c_curr) = (c, c, c);
        let mut reduction_prev = true;
        let mut cells = Vec::new();
        for i in 0..layers {
            let reduction = i == layers / 3 || i == 2 * layers / 3;
            if reduction {
                c_curr *= 2;
            }
            let cell = Cell::new(&(p / "cells" / i), genotype, c_prev_prev, c_prev, c_curr, reduction, reduction_prev);
            reduction_prev = reduction;
            (c_prev_prev, c_prev) = (c_prev, cell.concat.len() as i64 * c_curr);
            cells.push(cell);
        }
        NetworkImageNet { stem0, stem1, cells, classifier: nn::linear(p / "classifier", c_prev, classes, Default::default()) }
    }
}

impl ModuleT for NetworkImageNet {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let mut s0 = self.stem0.forward_t(x, train);
        let mut s1 = self.stem1.forward_t(&s0, train);
        for cell in &self.cells {
            let next = cell.forward_t(&s0, &s1, train);
            (s0, s1) = (s1, next);
        }
        let x = s1.avg_pool2d([7, 7], [7, 7], [0, 0], false, true, None::<i64>);
        x.view([x.size()[0], -1]).apply(&self.classifier)
    }
}
