//! NASNet-A large (6 @ 4032) and mobile (4 @ 1056) as the `pretrainedmodels` package's
//! `nasnetalarge` and `nasnetamobile` build them, variable names included.
//!
//! The two differ in more than size, and both quirks are kept: the mobile network pads and
//! crops around its stride-2 separable convolutions and pools in the second stem and second
//! reduction cell (and makes those crops contiguous), and the large network feeds the cell
//! after each reduction the output of the second-to-last normal cell, as TensorFlow's
//! `skip_reduction_layer_input` does.

use tch::nn::{self, ModuleT, Path};
use tch::Tensor;

use super::layers::{avg_pool_3x3, batch_norm, crop_top_left, max_pool_3x3, Conv};

const EPS: f64 = 0.001;

/// Which network: the two share cells but not their details.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    Large,
    Mobile,
}

impl Size {
    fn stem_filters(self) -> i64 {
        match self {
            Size::Large => 96,
            Size::Mobile => 32,
        }
    }

    fn penultimate_filters(self) -> i64 {
        match self {
            Size::Large => 4032,
            Size::Mobile => 1056,
        }
    }

    /// Normal cells per stage, the first cell included.
    fn cells_per_stage(self) -> usize {
        match self {
            Size::Large => 6,
            Size::Mobile => 4,
        }
    }

    /// The final average pool's window (the feature map's size at the nominal input).
    fn pool(self) -> i64 {
        match self {
            Size::Large => 11,
            Size::Mobile => 7,
        }
    }
}

/// `SeparableConv2d`: depthwise then pointwise convolution, no bias.
#[derive(Debug)]
struct Separable {
    depthwise: nn::Conv2D,
    pointwise: nn::Conv2D,
}

impl Separable {
    fn new(p: &Path, cin: i64, cout: i64, kernel: i64, stride: i64, padding: i64) -> Self {
        Separable {
            depthwise: Conv::square(kernel).stride(stride).pad(padding).groups(cin).build(p / "depthwise_conv2d", cin, cin),
            pointwise: Conv::square(1).build(p / "pointwise_conv2d", cin, cout),
        }
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        x.apply(&self.depthwise).apply(&self.pointwise)
    }
}

/// How a branch's first separable convolution is wrapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shift {
    /// Plain.
    None,
    /// Zero-pad the top and left by one, crop them off after, then make it contiguous
    /// (`BranchSeparablesReduction`, and `BranchSeparables(name='specific')`).
    PadCrop,
}

/// `BranchSeparables` (and its `Stem` and `Reduction` variants): ReLU, separable conv, BN,
/// ReLU, separable conv, BN. The stem variant changes the channel count in the first
/// separable convolution instead of the second.
#[derive(Debug)]
struct Branch {
    sep1: Separable,
    bn1: nn::BatchNorm,
    sep2: Separable,
    bn2: nn::BatchNorm,
    shift: Shift,
}

impl Branch {
    #[allow(clippy::too_many_arguments)]
    fn new(p: &Path, cin: i64, cout: i64, kernel: i64, stride: i64, stem: bool, shift: Shift) -> Self {
        let padding = kernel / 2;
        let mid = if stem { cout } else { cin };
        Branch {
            sep1: Separable::new(&(p / "separable_1"), cin, mid, kernel, stride, padding),
            bn1: batch_norm(p / "bn_sep_1", mid, EPS),
            sep2: Separable::new(&(p / "separable_2"), mid, cout, kernel, 1, padding),
            bn2: batch_norm(p / "bn_sep_2", cout, EPS),
            shift,
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let x = x.relu();
        let x = match self.shift {
            Shift::None => self.sep1.forward(&x),
            Shift::PadCrop => shifted(&x, true, |x| self.sep1.forward(x)),
        };
        let x = x.apply_t(&self.bn1, train).relu();
        self.sep2.forward(&x).apply_t(&self.bn2, train)
    }
}

/// The pools of the reduction cells.
#[derive(Clone, Copy, Debug)]
enum Pool {
    Max { stride: i64 },
    Avg { stride: i64 },
    /// `MaxPoolPad` / `AvgPoolPad`: pad top-left, pool with stride 2, crop; `contiguous` as
    /// the mobile network's copy does.
    MaxPad { contiguous: bool },
    AvgPad { contiguous: bool },
}

impl Pool {
    fn forward(self, x: &Tensor) -> Tensor {
        match self {
            Pool::Max { stride } => max_pool_3x3(x, stride),
            Pool::Avg { stride } => avg_pool_3x3(x, stride),
            Pool::MaxPad { contiguous } => shifted(x, contiguous, |x| max_pool_3x3(x, 2)),
            Pool::AvgPad { contiguous } => shifted(x, contiguous, |x| avg_pool_3x3(x, 2)),
        }
    }
}

/// `f` on `x` zero-padded at the top and left, the padding cropped off after (and the crop
/// made contiguous when asked): NASNet's way to align stride-2 windows as TensorFlow does.
fn shifted(x: &Tensor, contiguous: bool, f: impl FnOnce(&Tensor) -> Tensor) -> Tensor {
    let y = crop_top_left(&f(&x.pad([1, 0, 1, 0], "constant", None)));
    if contiguous {
        y.contiguous()
    } else {
        y
    }
}

/// ReLU, 1×1 convolution, BN: the cells' `conv_1x1` and `conv_prev_1x1`.
#[derive(Debug)]
struct ReluConvBn {
    conv: nn::Conv2D,
    bn: nn::BatchNorm,
}

impl ReluConvBn {
    fn new(p: &Path, cin: i64, cout: i64) -> Self {
        ReluConvBn { conv: Conv::square(1).build(p / "conv", cin, cout), bn: batch_norm(p / "bn", cout, EPS) }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        x.relu().apply(&self.conv).apply_t(&self.bn, train)
    }
}

/// The factorized reduction of the previous input in `CellStem1` and `FirstCell`: two
/// stride-2 1×1 paths, the second shifted by one pixel, concatenated and normalised.
#[derive(Debug)]
struct FactorizedPaths {
    conv1: nn::Conv2D,
    conv2: nn::Conv2D,
    bn: nn::BatchNorm,
}

impl FactorizedPaths {
    fn new(p: &Path, cin: i64, cout_each: i64) -> Self {
        FactorizedPaths {
            conv1: Conv::square(1).build(p / "path_1" / "conv", cin, cout_each),
            conv2: Conv::square(1).build(p / "path_2" / "conv", cin, cout_each),
            bn: batch_norm(p / "final_path_bn", 2 * cout_each, EPS),
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let pool = |x: &Tensor| x.avg_pool2d([1, 1], [2, 2], [0, 0], false, false, None::<i64>);
        let x = x.relu();
        let path1 = pool(&x).apply(&self.conv1);
        let path2 = pool(&crop_top_left(&x.pad([0, 1, 0, 1], "constant", None))).apply(&self.conv2);
        Tensor::cat(&[path1, path2], 1).apply_t(&self.bn, train)
    }
}

/// How a reduction-style cell makes its two inputs.
#[derive(Debug)]
enum Prologue {
    /// `CellStem0`: `a = conv_1x1(x)`, `b = x`.
    Stem0(ReluConvBn),
    /// `CellStem1`: `a = conv_1x1(stem0)`, `b = factorized(conv0)`.
    Stem1(ReluConvBn, FactorizedPaths),
    /// `ReductionCell0/1`: `b = conv_prev_1x1(prev)`, `a = conv_1x1(x)`.
    Reduction { prev: ReluConvBn, this: ReluConvBn },
}

/// `CellStem0`, `CellStem1`, `ReductionCell0` and `ReductionCell1`: five combinations of the
/// same shape, four of them concatenated (channels ×4, spatial size ÷2).
#[derive(Debug)]
struct ReductionCell {
    prologue: Prologue,
    left0: Branch,
    right0: Branch,
    left1: Pool,
    right1: Branch,
    left2: Pool,
    right2: Branch,
    left4: Branch,
    right4: Pool,
}

impl ReductionCell {
    /// `b_in`/`b_stem`: the second input's channels and whether its branches are the stem
    /// variant (only `CellStem0`'s are); `shift` and pools as the cell kind has them.
    #[allow(clippy::too_many_arguments)]
    fn new(p: &Path, prologue: Prologue, filters: i64, b_in: i64, b_stem: bool, shift: Shift, max: Pool, avg: Pool) -> Self {
        let branch = |name: &str, cin: i64, kernel: i64, stride: i64, stem: bool| Branch::new(&(p / name), cin, filters, kernel, stride, stem, shift);
        ReductionCell {
            prologue,
            left0: branch("comb_iter_0_left", filters, 5, 2, false),
            right0: branch("comb_iter_0_right", b_in, 7, 2, b_stem),
            left1: max,
            right1: branch("comb_iter_1_right", b_in, 7, 2, b_stem),
            left2: avg,
            right2: branch("comb_iter_2_right", b_in, 5, 2, b_stem),
            left4: branch("comb_iter_4_left", filters, 3, 1, false),
            right4: max,
        }
    }

    fn forward_t(&self, x: &Tensor, prev: Option<&Tensor>, train: bool) -> Tensor {
        let (a, b) = match (&self.prologue, prev) {
            (Prologue::Stem0(conv), _) => (conv.forward_t(x, train), x.shallow_clone()),
            // CellStem1(x_conv0, x_stem_0): here `x` is stem 0's output, `prev` conv0's.
            (Prologue::Stem1(conv, paths), Some(conv0)) => {
                let a = conv.forward_t(x, train);
                (a, paths.forward_t(conv0, train))
            }
            (Prologue::Reduction { prev: prev_conv, this }, Some(prev)) => {
                let b = prev_conv.forward_t(prev, train);
                (this.forward_t(x, train), b)
            }
            _ => unreachable!("stem 1 and reduction cells are always given the previous input"),
        };
        let comb0 = self.left0.forward_t(&a, train) + self.right0.forward_t(&b, train);
        let comb1 = self.left1.forward(&a) + self.right1.forward_t(&b, train);
        let comb2 = self.left2.forward(&a) + self.right2.forward_t(&b, train);
        let comb3 = avg_pool_3x3(&comb0, 1) + &comb1;
        let comb4 = self.left4.forward_t(&comb0, train) + self.right4.forward(&a);
        Tensor::cat(&[comb1, comb2, comb3, comb4], 1)
    }
}

/// `FirstCell` (its previous input factorized) and `NormalCell` (1×1 convolution).
#[derive(Debug)]
struct NormalCell {
    prev: Result<FactorizedPaths, ReluConvBn>,
    this: ReluConvBn,
    left0: Branch,
    right0: Branch,
    left1: Branch,
    right1: Branch,
    left4: Branch,
}

impl NormalCell {
    fn new(p: &Path, first: bool, in_left: i64, out_left: i64, in_right: i64, out_right: i64) -> Self {
        let branch = |name: &str, c: i64, kernel: i64| Branch::new(&(p / name), c, c, kernel, 1, false, Shift::None);
        // The first cell's factorized paths give `out_left` channels each, `2 · out_left` in
        // all (equal to `out_right`).
        let (prev, left) = if first { (Ok(FactorizedPaths::new(p, in_left, out_left)), 2 * out_left) } else { (Err(ReluConvBn::new(&(p / "conv_prev_1x1"), in_left, out_left)), out_left) };
        NormalCell {
            prev,
            this: ReluConvBn::new(&(p / "conv_1x1"), in_right, out_right),
            left0: branch("comb_iter_0_left", out_right, 5),
            right0: branch("comb_iter_0_right", if first { out_right } else { left }, 3),
            left1: branch("comb_iter_1_left", if first { out_right } else { left }, 5),
            right1: branch("comb_iter_1_right", if first { out_right } else { left }, 3),
            left4: branch("comb_iter_4_left", out_right, 3),
        }
    }

    fn forward_t(&self, x: &Tensor, prev: &Tensor, train: bool) -> Tensor {
        let left = match &self.prev {
            Ok(paths) => paths.forward_t(prev, train),
            Err(conv) => conv.forward_t(prev, train),
        };
        let right = self.this.forward_t(x, train);
        let comb0 = self.left0.forward_t(&right, train) + self.right0.forward_t(&left, train);
        let comb1 = self.left1.forward_t(&left, train) + self.right1.forward_t(&left, train);
        let comb2 = avg_pool_3x3(&right, 1) + &left;
        let comb3 = avg_pool_3x3(&left, 1) + avg_pool_3x3(&left, 1);
        let comb4 = self.left4.forward_t(&right, train) + &right;
        Tensor::cat(&[left, comb0, comb1, comb2, comb3, comb4], 1)
    }
}

/// One cell in the network's sequence.
#[derive(Debug)]
enum Cell {
    Normal(NormalCell),
    Reduction(ReductionCell),
}

/// NASNet-A.
#[derive(Debug)]
pub struct NasNet {
    size: Size,
    conv0: nn::Conv2D,
    bn0: nn::BatchNorm,
    stem0: ReductionCell,
    stem1: ReductionCell,
    cells: Vec<Cell>,
    linear: nn::Linear,
}

impl NasNet {
    pub fn new(p: &Path, size: Size, classes: i64) -> Self {
        let stem = size.stem_filters();
        let f = size.penultimate_filters() / 24;
        let mobile = size == Size::Mobile;
        let shift = if mobile { Shift::PadCrop } else { Shift::None };
        let (max_s2, avg_s2) = (Pool::Max { stride: 2 }, Pool::Avg { stride: 2 });
        let (max_pad, avg_pad) = (Pool::MaxPad { contiguous: mobile }, Pool::AvgPad { contiguous: mobile });
        let (max1, avg1) = if mobile { (max_pad, avg_pad) } else { (max_s2, avg_s2) };

        let conv0 = Conv::square(3).stride(2).build(p / "conv0" / "conv", 3, stem);
        let bn0 = batch_norm(p / "conv0" / "bn", stem, EPS);
        let s0 = &(p / "cell_stem_0");
        let stem0 = ReductionCell::new(s0, Prologue::Stem0(ReluConvBn::new(&(s0 / "conv_1x1"), stem, f / 4)), f / 4, stem, true, Shift::None, max_s2, avg_s2);
        let s1 = &(p / "cell_stem_1");
        let prologue = Prologue::Stem1(ReluConvBn::new(&(s1 / "conv_1x1"), f, f / 2), FactorizedPaths::new(s1, stem, f / 4));
        let stem1 = ReductionCell::new(s1, prologue, f / 2, f / 2, false, shift, max1, avg1);

        // Output channels: normal cells 6·m·f, reductions 4·m·f, in stages m = 1, 2, 4.
        let mut cells = Vec::new();
        let (mut in_prev, mut in_this) = (f, 2 * f); // stem 0's and stem 1's outputs
        for (stage, m) in [1, 2, 4].into_iter().enumerate() {
            if stage > 0 {
                let r = &(p / format!("reduction_cell_{}", stage - 1));
                let prologue = Prologue::Reduction { prev: ReluConvBn::new(&(r / "conv_prev_1x1"), in_prev, m * f), this: ReluConvBn::new(&(r / "conv_1x1"), in_this, m * f) };
                // The first reduction always pads and crops; the second as the stem does.
                let (rshift, rmax, ravg) = if stage == 1 { (Shift::PadCrop, max_pad, avg_pad) } else { (shift, max1, avg1) };
                cells.push(Cell::Reduction(ReductionCell::new(r, prologue, m * f, m * f, false, rshift, rmax, ravg)));
                // The next cell's previous input is a normal cell's output either way (see
                // `forward_t`), as wide as `in_this` was.
                (in_prev, in_this) = (in_this, 4 * m * f);
            }
            for i in 0..size.cells_per_stage() {
                // pretrainedmodels numbers the cells of stage s from 6·s.
                let c = &(p / format!("cell_{}", 6 * stage + i));
                let first = i == 0;
                let out_left = if first { m * f / 2 } else { m * f };
                cells.push(Cell::Normal(NormalCell::new(c, first, in_prev, out_left, in_this, m * f)));
                (in_prev, in_this) = (in_this, 6 * m * f);
            }
        }
        NasNet { size, conv0, bn0, stem0, stem1, cells, linear: nn::linear(p / "last_linear", 24 * f, classes, Default::default()) }
    }
}

impl ModuleT for NasNet {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let conv0 = x.apply(&self.conv0).apply_t(&self.bn0, train);
        let stem0 = self.stem0.forward_t(&conv0, None, train);
        let stem1 = self.stem1.forward_t(&stem0, Some(&conv0), train);
        // `outputs` holds the cell outputs in order; a normal cell reads the last two, a
        // reduction cell too, and the cell after a reduction reads the reduction's output and
        // either the last normal cell's (mobile) or the one before it (large).
        let mut outputs = vec![stem0, stem1];
        let mut after_reduction = false;
        for cell in &self.cells {
            let n = outputs.len();
            let out = match cell {
                Cell::Reduction(r) => {
                    after_reduction = true;
                    r.forward_t(&outputs[n - 1], Some(&outputs[n - 2]), train)
                }
                Cell::Normal(c) => {
                    let prev = if std::mem::take(&mut after_reduction) && self.size == Size::Large { &outputs[n - 3] } else { &outputs[n - 2] };
                    c.forward_t(&outputs[n - 1], prev, train)
                }
            };
            outputs.push(out);
        }
        let x = outputs.pop().expect("the last cell's output").relu();
        let x = x.avg_pool2d([self.size.pool(), self.size.pool()], [1, 1], [0, 0], false, true, None::<i64>);
        let x = x.view([x.size()[0], -1]);
        x.dropout(0.5, train).apply(&self.linear)
    }
}
