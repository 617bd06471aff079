//! The paper's model zoo, by name: every model with its input shape, class count and the
//! reference definition it reproduces (parameter and operator counts included, which the
//! tests check).
//!
//! ResNets come from tch::vision, which matches torchvision op for op. The others are written
//! here with tch::nn, because tch::vision's versions differ from the references
//! ([`inception`], [`mobilenet`], [`efficientnet`] say how) or do not exist ([`nasnet`],
//! [`darts`]). Variables carry the reference `state_dict`'s names, so weights exported from
//! PyTorch (`.safetensors`, or tch's `.ot`) load with [`Model::load`]. Weights are otherwise
//! random: the paper measured latency, which weights do not change.

pub mod darts;
pub mod efficientnet;
pub mod inception;
pub mod layers;
pub mod mobilenet;
pub mod nasnet;

use std::path::Path;
use std::rc::Rc;

use nimble_torch::Nimble;

pub use crate::zoo::{info, Dataset, ModelInfo, INFERENCE_BATCH, MODELS, TRAINING_BATCHES};
use tch::nn::{self, ModuleT};
use tch::{Device, Tensor};

/// A built model: its network and the VarStore that owns its parameters (frozen: no
/// gradients, as inference and the rewrites need).
pub struct Model {
    pub info: ModelInfo,
    pub dataset: Dataset,
    pub device: Device,
    /// The floating-point dtype of the parameters and inputs (float32 unless `set_kind`).
    pub kind: tch::Kind,
    net: Rc<dyn ModuleT>,
    vs: nn::VarStore,
}

impl Model {
    /// A fresh input batch of this model's shape on its device (standard normal values).
    pub fn input(&self, batch: i64) -> Tensor {
        Tensor::randn(self.info.input_shape(self.dataset, batch), (self.kind, self.device))
    }

    /// The forward in evaluation mode.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        self.net.forward_t(x, false)
    }

    /// The forward in evaluation (`train` false) or training mode.
    pub fn forward_t(&self, x: &Tensor, train: bool) -> Tensor {
        self.net.forward_t(x, train)
    }

    /// The model wrapped for Nimble (shares the parameters): evaluation mode, or training mode
    /// when prepared for training.
    pub fn nimble(&self) -> Nimble {
        let net = self.net.clone();
        Nimble::from_fn_t(move |xs: &[Tensor], train| vec![net.forward_t(&xs[0], train)])
    }

    /// Converts the parameters and buffers to `kind` (float16, bfloat16, float32, float64);
    /// `input` then makes inputs of that dtype, so eager and every prepared graph compute in it.
    pub fn set_kind(&mut self, kind: tch::Kind) {
        self.vs.set_kind(kind);
        self.kind = kind;
    }

    /// Lets the parameters require gradients again (models are built frozen), for training.
    pub fn unfreeze(&mut self) {
        self.vs.unfreeze();
    }

    /// A fresh batch of class-index targets for this model's dataset on its device.
    pub fn targets(&self, batch: i64) -> Tensor {
        Tensor::randint(self.dataset.classes(), [batch], (tch::Kind::Int64, self.device))
    }

    /// The number of parameters (batch-norm running statistics are buffers, not counted), as
    /// PyTorch's `sum(p.numel() for p in model.parameters())`.
    pub fn parameter_count(&self) -> i64 {
        self.vs.trainable_variables().iter().map(|t| t.numel() as i64).sum()
    }

    /// The VarStore holding the parameters and buffers, named as the reference's state_dict.
    pub fn var_store(&self) -> &nn::VarStore {
        &self.vs
    }

    /// The structure of the model's task graph, traced on CPU tensors in evaluation mode
    /// without the inference rewrites (the device the model was built on must be the CPU).
    pub fn graph_stats(&self, batch: i64) -> nimble_torch::Result<GraphStats> {
        let trace = self.nimble().trace(&[self.input(batch)], false)?;
        let graph = trace.task_graph()?;
        let width = graph.width(&graph.reachability());
        Ok(GraphStats { ops: trace.len(), tasks: graph.len(), edges: graph.edge_count(), width })
    }

    /// Loads weights (and batch-norm statistics) from a `.safetensors` file or a tch `.ot`
    /// file, by variable name. Every variable of the model must be in the file; extra entries
    /// (such as PyTorch's `num_batches_tracked`) are ignored. On error the model may hold a
    /// mix of old and new values, so drop it.
    pub fn load(&mut self, path: &Path) -> Result<(), String> {
        let read = match path.extension().and_then(|e| e.to_str()) {
            Some("safetensors") => Tensor::read_safetensors(path),
            Some("ot") => Tensor::load_multi(path),
            _ => return Err(format!("{}: expected a .safetensors or .ot weight file", path.display())),
        };
        let context = |what: String| format!("loading {} into {}: {what}", path.display(), self.info.name);
        let file: std::collections::HashMap<String, Tensor> = read.map_err(|e| context(e.to_string()))?.into_iter().collect();
        // Checked in name order before anything is copied, so the error names the first problem
        // (tch's own load visits the variables in hash order, and copies as it goes).
        let mut variables: Vec<(String, Tensor)> = self.vs.variables().into_iter().collect();
        variables.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, variable) in &variables {
            match file.get(name) {
                None => return Err(context(format!("the file has no `{name}`"))),
                Some(value) if value.size() != variable.size() => {
                    return Err(context(format!("`{name}` is {:?} in the file, expected {:?}", value.size(), variable.size())))
                }
                Some(_) => {}
            }
        }
        self.vs.load(path).map_err(|e| context(e.to_string()))
    }
}

/// A model's task graph in numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GraphStats {
    /// Top-level ATen ops recorded in one forward.
    pub ops: usize,
    /// Ops that launch GPU work (the task graph's nodes): views and other metadata-only ops
    /// are left out.
    pub tasks: usize,
    pub edges: usize,
    /// The most tasks that can run at once (maximum logical concurrency).
    pub width: usize,
}

/// Builds a model for `dataset` on `device`, with random weights, frozen.
pub fn build(name: &str, dataset: Dataset, device: Device) -> Result<Model, String> {
    let info = info(name)?;
    if dataset == Dataset::Cifar10 && !info.training {
        let trained: Vec<_> = MODELS.iter().filter(|m| m.training).map(|m| m.name).collect();
        return Err(format!("`{name}` has no CIFAR-10 variant; the training models are {}", trained.join(", ")));
    }
    let classes = dataset.classes();
    let mut vs = nn::VarStore::new(device);
    let p = vs.root();
    let net: Rc<dyn ModuleT> = match name {
        "resnet50" => Rc::new(tch::vision::resnet::resnet50(&p, classes)),
        "resnet101" => Rc::new(tch::vision::resnet::resnet101(&p, classes)),
        "inception-v3" => Rc::new(inception::InceptionV3::new(&p, classes)),
        "mobilenet-v2" => Rc::new(mobilenet::MobileNetV2::new(&p, classes)),
        "efficientnet-b0" => Rc::new(efficientnet::EfficientNet::new(&p, efficientnet::Scale::b(0).expect("B0"), classes)),
        "efficientnet-b5" => Rc::new(efficientnet::EfficientNet::new(&p, efficientnet::Scale::b(5).expect("B5"), classes)),
        "nasnet-a-large" => Rc::new(nasnet::NasNet::new(&p, nasnet::Size::Large, classes)),
        "nasnet-a-mobile" => Rc::new(nasnet::NasNet::new(&p, nasnet::Size::Mobile, classes)),
        "darts" => Rc::new(darts::NetworkImageNet::new(&p, &darts::DARTS_V2, 48, 14, classes)),
        "amoebanet" => Rc::new(darts::NetworkImageNet::new(&p, &darts::AMOEBA, 48, 14, classes)),
        _ => unreachable!("info() knows every name"),
    };
    vs.freeze();
    Ok(Model { info, dataset, device, kind: tch::Kind::Float, net, vs })
}
