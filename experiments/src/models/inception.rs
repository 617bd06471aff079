//! Inception-v3 as torchvision's `inception_v3(weights=None)` builds it: auxiliary head
//! included (its parameters count, it runs only in training), no input transform.
//!
//! tch::vision's Inception-v3 has no auxiliary head and applies two more ReLUs, so it is not
//! used here.

use tch::nn::{self, ModuleT, Path};
use tch::Tensor;

use super::layers::{run_all as run, Act, Conv, ConvBn};

const EPS: f64 = 0.001;

/// torchvision's `BasicConv2d`: convolution without bias, batch norm (eps 0.001), ReLU.
fn basic(p: &Path, name: &str, cin: i64, cout: i64, conv: Conv) -> ConvBn {
    ConvBn::named(&(p / name), "conv", "bn", cin, cout, conv, EPS, Act::Relu)
}

fn avg_pool_3x3_s1(x: &Tensor) -> Tensor {
    x.avg_pool2d([3, 3], [1, 1], [1, 1], false, true, None::<i64>)
}

fn max_pool_3x3_s2(x: &Tensor) -> Tensor {
    x.max_pool2d([3, 3], [2, 2], [0, 0], [1, 1], false)
}

#[derive(Debug)]
struct InceptionA {
    b1: ConvBn,
    b5: Vec<ConvBn>,
    b3: Vec<ConvBn>,
    pool: ConvBn,
}

impl InceptionA {
    fn new(p: &Path, cin: i64, pool_features: i64) -> Self {
        InceptionA {
            b1: basic(p, "branch1x1", cin, 64, Conv::square(1)),
            b5: vec![basic(p, "branch5x5_1", cin, 48, Conv::square(1)), basic(p, "branch5x5_2", 48, 64, Conv::square(5).pad(2))],
            b3: vec![
                basic(p, "branch3x3dbl_1", cin, 64, Conv::square(1)),
                basic(p, "branch3x3dbl_2", 64, 96, Conv::square(3).pad(1)),
                basic(p, "branch3x3dbl_3", 96, 96, Conv::square(3).pad(1)),
            ],
            pool: basic(p, "branch_pool", cin, pool_features, Conv::square(1)),
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let b1 = self.b1.forward_t(x, train);
        let b5 = run(&self.b5, x, train);
        let b3 = run(&self.b3, x, train);
        let pool = self.pool.forward_t(&avg_pool_3x3_s1(x), train);
        Tensor::cat(&[b1, b5, b3, pool], 1)
    }
}

#[derive(Debug)]
struct InceptionB {
    b3: ConvBn,
    b3dbl: Vec<ConvBn>,
}

impl InceptionB {
    fn new(p: &Path, cin: i64) -> Self {
        InceptionB {
            b3: basic(p, "branch3x3", cin, 384, Conv::square(3).stride(2)),
            b3dbl: vec![
                basic(p, "branch3x3dbl_1", cin, 64, Conv::square(1)),
                basic(p, "branch3x3dbl_2", 64, 96, Conv::square(3).pad(1)),
                basic(p, "branch3x3dbl_3", 96, 96, Conv::square(3).stride(2)),
            ],
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let b3 = self.b3.forward_t(x, train);
        let b3dbl = run(&self.b3dbl, x, train);
        Tensor::cat(&[b3, b3dbl, max_pool_3x3_s2(x)], 1)
    }
}

#[derive(Debug)]
struct InceptionC {
    b1: ConvBn,
    b7: Vec<ConvBn>,
    b7dbl: Vec<ConvBn>,
    pool: ConvBn,
}

impl InceptionC {
    fn new(p: &Path, cin: i64, c7: i64) -> Self {
        let row = || Conv::rect(1, 7).pads(0, 3);
        let col = || Conv::rect(7, 1).pads(3, 0);
        InceptionC {
            b1: basic(p, "branch1x1", cin, 192, Conv::square(1)),
            b7: vec![
                basic(p, "branch7x7_1", cin, c7, Conv::square(1)),
                basic(p, "branch7x7_2", c7, c7, row()),
                basic(p, "branch7x7_3", c7, 192, col()),
            ],
            b7dbl: vec![
                basic(p, "branch7x7dbl_1", cin, c7, Conv::square(1)),
                basic(p, "branch7x7dbl_2", c7, c7, col()),
                basic(p, "branch7x7dbl_3", c7, c7, row()),
                basic(p, "branch7x7dbl_4", c7, c7, col()),
                basic(p, "branch7x7dbl_5", c7, 192, row()),
            ],
            pool: basic(p, "branch_pool", cin, 192, Conv::square(1)),
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let b1 = self.b1.forward_t(x, train);
        let b7 = run(&self.b7, x, train);
        let b7dbl = run(&self.b7dbl, x, train);
        let pool = self.pool.forward_t(&avg_pool_3x3_s1(x), train);
        Tensor::cat(&[b1, b7, b7dbl, pool], 1)
    }
}

#[derive(Debug)]
struct InceptionD {
    b3: Vec<ConvBn>,
    b7x3: Vec<ConvBn>,
}

impl InceptionD {
    fn new(p: &Path, cin: i64) -> Self {
        InceptionD {
            b3: vec![basic(p, "branch3x3_1", cin, 192, Conv::square(1)), basic(p, "branch3x3_2", 192, 320, Conv::square(3).stride(2))],
            b7x3: vec![
                basic(p, "branch7x7x3_1", cin, 192, Conv::square(1)),
                basic(p, "branch7x7x3_2", 192, 192, Conv::rect(1, 7).pads(0, 3)),
                basic(p, "branch7x7x3_3", 192, 192, Conv::rect(7, 1).pads(3, 0)),
                basic(p, "branch7x7x3_4", 192, 192, Conv::square(3).stride(2)),
            ],
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let b3 = run(&self.b3, x, train);
        let b7x3 = run(&self.b7x3, x, train);
        Tensor::cat(&[b3, b7x3, max_pool_3x3_s2(x)], 1)
    }
}

#[derive(Debug)]
struct InceptionE {
    b1: ConvBn,
    b3_1: ConvBn,
    b3_2a: ConvBn,
    b3_2b: ConvBn,
    dbl_1: ConvBn,
    dbl_2: ConvBn,
    dbl_3a: ConvBn,
    dbl_3b: ConvBn,
    pool: ConvBn,
}

impl InceptionE {
    fn new(p: &Path, cin: i64) -> Self {
        let row = || Conv::rect(1, 3).pads(0, 1);
        let col = || Conv::rect(3, 1).pads(1, 0);
        InceptionE {
            b1: basic(p, "branch1x1", cin, 320, Conv::square(1)),
            b3_1: basic(p, "branch3x3_1", cin, 384, Conv::square(1)),
            b3_2a: basic(p, "branch3x3_2a", 384, 384, row()),
            b3_2b: basic(p, "branch3x3_2b", 384, 384, col()),
            dbl_1: basic(p, "branch3x3dbl_1", cin, 448, Conv::square(1)),
            dbl_2: basic(p, "branch3x3dbl_2", 448, 384, Conv::square(3).pad(1)),
            dbl_3a: basic(p, "branch3x3dbl_3a", 384, 384, row()),
            dbl_3b: basic(p, "branch3x3dbl_3b", 384, 384, col()),
            pool: basic(p, "branch_pool", cin, 192, Conv::square(1)),
        }
    }

    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let b1 = self.b1.forward_t(x, train);
        let b3 = self.b3_1.forward_t(x, train);
        let b3 = Tensor::cat(&[self.b3_2a.forward_t(&b3, train), self.b3_2b.forward_t(&b3, train)], 1);
        let dbl = self.dbl_2.forward_t(&self.dbl_1.forward_t(x, train), train);
        let dbl = Tensor::cat(&[self.dbl_3a.forward_t(&dbl, train), self.dbl_3b.forward_t(&dbl, train)], 1);
        let pool = self.pool.forward_t(&avg_pool_3x3_s1(x), train);
        Tensor::cat(&[b1, b3, dbl, pool], 1)
    }
}

/// The auxiliary classifier: built for parameter parity, never run (torchvision runs it only
/// in training, where its loss is optional; Nimble's training comparison does not use it).
#[derive(Debug)]
#[allow(dead_code)]
struct InceptionAux {
    conv0: ConvBn,
    conv1: ConvBn,
    fc: nn::Linear,
}

impl InceptionAux {
    fn new(p: &Path, cin: i64, classes: i64) -> Self {
        InceptionAux {
            conv0: basic(p, "conv0", cin, 128, Conv::square(1)),
            conv1: basic(p, "conv1", 128, 768, Conv::square(5)),
            fc: nn::linear(p / "fc", 768, classes, Default::default()),
        }
    }
}

/// Inception-v3 (299×299 inputs).
#[derive(Debug)]
pub struct InceptionV3 {
    stem: Vec<ConvBn>,
    stem2: Vec<ConvBn>,
    a: Vec<InceptionA>,
    b: InceptionB,
    c: Vec<InceptionC>,
    _aux: InceptionAux,
    d: InceptionD,
    e: Vec<InceptionE>,
    fc: nn::Linear,
}

impl InceptionV3 {
    pub fn new(p: &Path, classes: i64) -> Self {
        InceptionV3 {
            stem: vec![
                basic(p, "Conv2d_1a_3x3", 3, 32, Conv::square(3).stride(2)),
                basic(p, "Conv2d_2a_3x3", 32, 32, Conv::square(3)),
                basic(p, "Conv2d_2b_3x3", 32, 64, Conv::square(3).pad(1)),
            ],
            stem2: vec![basic(p, "Conv2d_3b_1x1", 64, 80, Conv::square(1)), basic(p, "Conv2d_4a_3x3", 80, 192, Conv::square(3))],
            a: vec![InceptionA::new(&(p / "Mixed_5b"), 192, 32), InceptionA::new(&(p / "Mixed_5c"), 256, 64), InceptionA::new(&(p / "Mixed_5d"), 288, 64)],
            b: InceptionB::new(&(p / "Mixed_6a"), 288),
            c: vec![
                InceptionC::new(&(p / "Mixed_6b"), 768, 128),
                InceptionC::new(&(p / "Mixed_6c"), 768, 160),
                InceptionC::new(&(p / "Mixed_6d"), 768, 160),
                InceptionC::new(&(p / "Mixed_6e"), 768, 192),
            ],
            _aux: InceptionAux::new(&(p / "AuxLogits"), 768, classes),
            d: InceptionD::new(&(p / "Mixed_7a"), 768),
            e: vec![InceptionE::new(&(p / "Mixed_7b"), 1280), InceptionE::new(&(p / "Mixed_7c"), 2048)],
            fc: nn::linear(p / "fc", 2048, classes, Default::default()),
        }
    }
}

impl ModuleT for InceptionV3 {
    fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        let x = max_pool_3x3_s2(&run(&self.stem, x, train));
        let mut x = max_pool_3x3_s2(&run(&self.stem2, &x, train));
        for a in &self.a {
            x = a.forward_t(&x, train);
        }
        x = self.b.forward_t(&x, train);
        for c in &self.c {
            x = c.forward_t(&x, train);
        }
        x = self.d.forward_t(&x, train);
        for e in &self.e {
            x = e.forward_t(&x, train);
        }
        // torchvision: adaptive average pool, dropout, flatten, fc.
        let x = x.adaptive_avg_pool2d([1, 1]).dropout(0.5, train).flatten(1, -1);
        x.apply(&self.fc)
    }
}
