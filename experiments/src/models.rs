//! The paper's models that tch::vision provides, by name, with their input sizes.
//!
//! Random weights (the paper measured latency, which weights do not change). Each model is
//! built under its own VarStore, frozen, so the inference rewrites can trace it.

use std::rc::Rc;

use nimble_torch::Nimble;
use tch::nn::{self, ModuleT};
use tch::{Device, Tensor};

/// A model's forward, in evaluation mode.
pub type Forward = Rc<dyn Fn(&Tensor) -> Tensor>;

/// One entry of the registry.
#[derive(Clone, Copy, Debug)]
pub struct ModelInfo {
    pub name: &'static str,
    /// Input height = width, as in the paper.
    pub resolution: i64,
    pub summary: &'static str,
}

/// Every model, in the order tables list them.
pub const MODELS: &[ModelInfo] = &[
    ModelInfo { name: "resnet50", resolution: 224, summary: "ResNet-50 (tch::vision)" },
    ModelInfo { name: "resnet101", resolution: 224, summary: "ResNet-101 (tch::vision)" },
    ModelInfo { name: "inception-v3", resolution: 299, summary: "Inception-v3 (tch::vision)" },
    ModelInfo { name: "mobilenet-v2", resolution: 224, summary: "MobileNetV2 (tch::vision)" },
    ModelInfo { name: "efficientnet-b0", resolution: 224, summary: "EfficientNet-B0 (tch::vision)" },
    ModelInfo { name: "efficientnet-b5", resolution: 456, summary: "EfficientNet-B5 (tch::vision)" },
];

/// A built model: its forward and the VarStore that owns its parameters.
pub struct Model {
    pub info: ModelInfo,
    pub forward: Forward,
    pub device: Device,
    _vs: nn::VarStore,
}

impl Model {
    /// A fresh input batch of this model's shape on its device (standard normal values).
    pub fn input(&self, batch: i64) -> Tensor {
        Tensor::randn([batch, 3, self.info.resolution, self.info.resolution], (tch::Kind::Float, self.device))
    }

    /// The model wrapped for Nimble (shares the parameters).
    pub fn nimble(&self) -> Nimble {
        let forward = self.forward.clone();
        Nimble::from_fn(move |xs: &[Tensor]| vec![forward(&xs[0])])
    }
}

/// Looks a model up by name.
pub fn info(name: &str) -> Result<ModelInfo, String> {
    MODELS.iter().find(|m| m.name == name).copied().ok_or_else(|| {
        format!("unknown model `{name}`; known models: {}", MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "))
    })
}

fn boxed<M: ModuleT + 'static>(model: M) -> Forward {
    Rc::new(move |x: &Tensor| model.forward_t(x, false))
}

/// Builds a model on `device` with 1000 classes and frozen random weights.
pub fn build(name: &str, device: Device) -> Result<Model, String> {
    let info = info(name)?;
    let mut vs = nn::VarStore::new(device);
    let p = vs.root();
    let forward = match name {
        "resnet50" => boxed(tch::vision::resnet::resnet50(&p, 1000)),
        "resnet101" => boxed(tch::vision::resnet::resnet101(&p, 1000)),
        "inception-v3" => boxed(tch::vision::inception::v3(&p, 1000)),
        "mobilenet-v2" => boxed(tch::vision::mobilenet::v2(&p, 1000)),
        "efficientnet-b0" => boxed(tch::vision::efficientnet::b0(&p, 1000)),
        "efficientnet-b5" => boxed(tch::vision::efficientnet::b5(&p, 1000)),
        _ => unreachable!("info() knows every name"),
    };
    vs.freeze();
    Ok(Model { info, forward, device, _vs: vs })
}
