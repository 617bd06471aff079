//! The paper's model zoo as data: every model's name, title, resolution, reference and whether
//! the paper trains it, and the batch sizes it runs at. Needs no libtorch, so the figure
//! commands check `--models` on any build (`models` builds them, with libtorch).

/// Which task a model is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dataset {
    /// 1000 classes at the model's ImageNet resolution (the inference comparison).
    ImageNet,
    /// 10 classes at 3×32×32 (the training comparison).
    Cifar10,
}

impl Dataset {
    pub fn classes(self) -> i64 {
        match self {
            Dataset::ImageNet => 1000,
            Dataset::Cifar10 => 10,
        }
    }
}

/// One entry of the registry.
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct ModelInfo {
    pub name: &'static str,
    /// The name figures print.
    pub title: &'static str,
    /// ImageNet input height = width, as in the paper.
    pub resolution: i64,
    /// The definition this model reproduces.
    pub reference: &'static str,
    /// The reference's parameter count with 1000 classes.
    pub reference_params: i64,
    /// The reference's top-level ATen ops in one evaluation forward at batch 1 (traced on CPU).
    pub reference_ops: usize,
    /// Whether the paper trains it (CIFAR-10 variant, batch 32/64/128).
    pub training: bool,
}

impl ModelInfo {
    /// The input shape `[batch, 3, H, W]` for `dataset`.
    pub fn input_shape(&self, dataset: Dataset, batch: i64) -> [i64; 4] {
        let side = match dataset {
            Dataset::ImageNet => self.resolution,
            Dataset::Cifar10 => 32,
        };
        [batch, 3, side, side]
    }

    /// The batch sizes the paper runs it at for `dataset` (none: no such variant).
    pub fn batch_sizes(&self, dataset: Dataset) -> &'static [i64] {
        match dataset {
            Dataset::ImageNet => &[INFERENCE_BATCH],
            Dataset::Cifar10 if self.training => &TRAINING_BATCHES,
            Dataset::Cifar10 => &[],
        }
    }
}

/// Batch sizes of the paper's experiments.
pub const INFERENCE_BATCH: i64 = 1;
pub const TRAINING_BATCHES: [i64; 3] = [32, 64, 128];

macro_rules! model {
    ($name:literal, $title:literal, $res:literal, $reference:literal, $params:literal, $ops:literal, $training:literal) => {
        ModelInfo { name: $name, title: $title, resolution: $res, reference: $reference, reference_params: $params, reference_ops: $ops, training: $training }
    };
}

/// Every model, in the order tables list them (the paper's).
pub const MODELS: &[ModelInfo] = &[
    model!("resnet50", "ResNet-50", 224, "torchvision.models.resnet50", 25_557_032, 175, true),
    model!("resnet101", "ResNet-101", 224, "torchvision.models.resnet101", 44_549_160, 345, false),
    model!("inception-v3", "Inception-v3", 299, "torchvision.models.inception_v3 (aux_logits=True)", 27_161_264, 314, false),
    model!("mobilenet-v2", "MobileNetV2", 224, "torchvision.models.mobilenet_v2", 3_504_872, 153, true),
    model!("efficientnet-b0", "EfficientNet-B0", 224, "torchvision.models.efficientnet_b0", 5_288_548, 240, true),
    model!("efficientnet-b5", "EfficientNet-B5", 456, "torchvision.models.efficientnet_b5", 30_389_784, 579, false),
    model!("nasnet-a-large", "NASNet-A large", 331, "pretrainedmodels.nasnetalarge", 88_753_150, 1275, false),
    model!("nasnet-a-mobile", "NASNet-A mobile", 224, "pretrainedmodels.nasnetamobile", 5_289_978, 1012, false),
    model!("darts", "DARTS", 224, "DARTS NetworkImageNet(C=48, layers=14, genotype DARTS_V2)", 4_718_752, 715, false),
    model!("amoebanet", "AmoebaNet", 224, "DARTS NetworkImageNet(C=48, layers=14, genotype AmoebaNet)", 4_627_360, 705, false),
];

/// Looks a model up by name.
pub fn info(name: &str) -> Result<ModelInfo, String> {
    MODELS.iter().find(|m| m.name == name).copied().ok_or_else(|| {
        format!("unknown model `{name}`; known models: {}", MODELS.iter().map(|m| m.name).collect::<Vec<_>>().join(", "))
    })
}


/// The models a `--models` list names (comma-separated, or `all`), checked: every name a zoo
/// model (with `training`, one the paper trains), none twice, at least one.
pub fn selection(list: &str, training: bool) -> Result<Vec<&'static str>, String> {
    let known: Vec<&'static str> = MODELS.iter().filter(|m| m.training || !training).map(|m| m.name).collect();
    if list == "all" {
        return Ok(known);
    }
    let what = if training { "training models" } else { "models" };
    let mut chosen = Vec::new();
    for name in list.split(',').map(str::trim) {
        match known.iter().find(|k| **k == name) {
            Some(k) if !chosen.contains(k) => chosen.push(*k),
            Some(_) => return Err(format!("`{name}` is named twice")),
            None => return Err(format!("`{name}` is not one of the {what}; expected `all` or some of {}", known.join(", "))),
        }
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_selection_is_checked() {
        assert_eq!(selection("all", false).unwrap().len(), MODELS.len());
        assert_eq!(selection("resnet50, darts", false).unwrap(), ["resnet50", "darts"]);
        for bad in ["bogus", "", ",", "resnet50,bogus", "resnet50,resnet50"] {
            assert!(selection(bad, false).is_err(), "{bad:?}");
        }
        assert!(selection("darts", true).unwrap_err().contains("training models"));
    }
}
