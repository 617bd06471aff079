//! The exporter's manifest: which models `experiments/python/export_torchscript.py` wrote, with
//! their inputs, or why it could not.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// `DIR/manifest.json` as the exporter writes it.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Manifest {
    /// The exporting PyTorch's version.
    pub torch: String,
    /// Where the models were traced (`cuda` or `cpu`).
    pub device: String,
    pub batch: i64,
    /// The model libraries' versions (torchvision, transformers, timm) the exporter found.
    #[serde(default)]
    pub versions: BTreeMap<String, String>,
    pub models: Vec<ManifestEntry>,
}

/// One model of the manifest: exported (`file`, `inputs`) or not (`error`).
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ManifestEntry {
    pub name: String,
    pub file: String,
    pub source: String,
    /// `--input` specifications of the forward's arguments.
    #[serde(default)]
    pub inputs: Vec<String>,
    #[serde(default)]
    pub parameters: Option<u64>,
    #[serde(default)]
    pub export_s: Option<f64>,
    /// Why the exporter could not write the file.
    #[serde(default)]
    pub error: Option<String>,
    /// What the exporter changed in the random initialization so the check proves something
    /// (`informative_weights` in the exporter).
    #[serde(default)]
    pub weights: Vec<String>,
}

impl Manifest {
    /// Reads and checks `path`.
    pub fn read(path: &Path) -> Result<Manifest, String> {
        let text = nimble_graph::json::read_text(path).map_err(|e| format!("{e} (expected the manifest.json that experiments/python/export_torchscript.py DIR writes)"))?;
        let manifest: Manifest = serde_json::from_str(&text).map_err(|e| format!("{}: not an exporter manifest: {e}", path.display()))?;
        for entry in &manifest.models {
            if entry.error.is_none() && entry.inputs.is_empty() {
                return Err(format!("{}: model `{}` has neither inputs nor an export error", path.display(), entry.name));
            }
        }
        Ok(manifest)
    }

    /// The entries named in `only` (all when empty), in the manifest's order; an unknown name is
    /// an error listing the known ones.
    pub fn select(&self, only: &[String]) -> Result<Vec<&ManifestEntry>, String> {
        for name in only {
            if !self.models.iter().any(|e| &e.name == name) {
                let names: Vec<&str> = self.models.iter().map(|e| e.name.as_str()).collect();
                return Err(format!("--only: `{name}` is not in the manifest, which has {}", names.join(", ")));
            }
        }
        Ok(self.models.iter().filter(|e| only.is_empty() || only.contains(&e.name)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::tests::entry;

    #[test]
    fn manifests_are_read_with_or_without_the_libraries_versions() {
        let dir = std::env::temp_dir().join(format!("nimble-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("manifest.json");
        let model = r#"{"name": "m", "file": "m.pt", "source": "s", "inputs": ["1x3:float32"]}"#;
        std::fs::write(&path, format!(r#"{{"torch": "2.11.0", "device": "cuda", "batch": 1, "models": [{model}]}}"#)).unwrap();
        assert!(Manifest::read(&path).unwrap().versions.is_empty());
        std::fs::write(&path, format!(r#"{{"torch": "2.11.0", "versions": {{"timm": "1.0.29"}}, "device": "cuda", "batch": 1, "models": [{model}]}}"#)).unwrap();
        assert_eq!(Manifest::read(&path).unwrap().versions["timm"], "1.0.29");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn manifest_selection_names_what_is_unknown() {
        let manifest = Manifest { torch: "2.11.0".into(), device: "cuda".into(), batch: 1, versions: Default::default(), models: vec![entry("a"), entry("b")] };
        assert_eq!(manifest.select(&["b".into()]).unwrap().len(), 1);
        assert_eq!(manifest.select(&[]).unwrap().len(), 2);
        let error = manifest.select(&["zz".into()]).unwrap_err();
        assert!(error.contains("`zz` is not in the manifest, which has a, b"), "{error}");
    }
}
