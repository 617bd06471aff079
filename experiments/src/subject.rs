//! What the inference experiments measure (a zoo model, or any TorchScript file with its inputs)
//! and how a prepared model's outputs are compared with its eager forward's.

use nimble_torch::{relative_error, Nimble};
use tch::Tensor;

use crate::models::Model;

/// What the inference experiments measure: a zoo model, or any TorchScript file with its inputs
/// (the `torchscript` module).
pub trait Subject {
    fn name(&self) -> &str;
    /// Fresh random inputs: a zoo model's at batch `batch`; a TorchScript file's as specified.
    fn inputs(&self, batch: i64) -> Vec<Tensor>;
    /// A Nimble over the model, not prepared.
    fn nimble(&self) -> nimble_torch::Result<Nimble>;
    /// The reference: the model's eager forward (gradients off), its output tensors flat.
    fn eager(&self, inputs: &[Tensor]) -> nimble_torch::Result<Vec<Tensor>>;
    /// The forward as a module libtorch's TorchScript runtime runs (tch's `CModule`).
    fn script_module(&self, batch: i64) -> nimble_torch::Result<tch::CModule>;
    /// The floating-point dtype the model computes in (which decides the tolerances).
    fn kind(&self) -> tch::Kind;
}

impl Subject for Model {
    fn name(&self) -> &str {
        self.info.name
    }

    fn inputs(&self, batch: i64) -> Vec<Tensor> {
        vec![self.input(batch)]
    }

    fn nimble(&self) -> nimble_torch::Result<Nimble> {
        Ok(Model::nimble(self))
    }

    fn kind(&self) -> tch::Kind {
        self.kind
    }

    fn eager(&self, inputs: &[Tensor]) -> nimble_torch::Result<Vec<Tensor>> {
        Ok(vec![tch::no_grad(|| self.forward(&inputs[0]))])
    }

    /// Exported by `Nimble::export_torchscript` and loaded on the model's device.
    fn script_module(&self, batch: i64) -> nimble_torch::Result<tch::CModule> {
        let path = std::env::temp_dir().join(format!("nimble-{}-{}.pt", self.info.name, std::process::id()));
        Model::nimble(self).export_torchscript(&[self.input(batch)], &path)?;
        let loaded = tch::CModule::load_on_device(&path, self.device).map_err(|e| torch_error("CModule::load", e));
        let _ = std::fs::remove_file(&path);
        let mut module = loaded?;
        module.set_eval();
        Ok(module)
    }
}

/// max over the outputs' tensors of their relative error against the reference's (see
/// `nimble_torch::relative_error`; integer and bool tensors must be equal, else infinite): how
/// the experiments compare a prepared model with eager.
pub fn outputs_error(outputs: &[Tensor], reference: &[Tensor]) -> f64 {
    if outputs.len() != reference.len() {
        return f64::INFINITY;
    }
    outputs.iter().zip(reference).fold(0.0, |worst: f64, (got, want)| {
        let error = if got.size() != want.size() || got.kind() != want.kind() {
            f64::INFINITY
        } else if !want.is_floating_point() {
            if got.equal(want) { 0.0 } else { f64::INFINITY }
        } else if want.numel() == 0 {
            0.0
        } else {
            relative_error(&got.to_kind(tch::Kind::Double), &want.to_kind(tch::Kind::Double))
        };
        worst.max(if error.is_nan() { f64::INFINITY } else { error })
    })
}

/// Runs a TorchScript module through libtorch's runtime (gradients off): its output's tensors.
pub(crate) fn run_script(module: &tch::CModule, inputs: &[Tensor]) -> nimble_torch::Result<Vec<Tensor>> {
    let args: Vec<tch::IValue> = inputs.iter().map(|t| tch::IValue::Tensor(t.shallow_clone())).collect();
    let output = tch::no_grad(|| module.forward_is(&args)).map_err(|e| torch_error("forward_is", e))?;
    let mut tensors = Vec::new();
    collect_tensors(output, &mut tensors);
    Ok(tensors)
}

fn collect_tensors(value: tch::IValue, out: &mut Vec<Tensor>) {
    match value {
        tch::IValue::Tensor(t) => out.push(t),
        tch::IValue::Tuple(items) | tch::IValue::GenericList(items) => items.into_iter().for_each(|v| collect_tensors(v, out)),
        tch::IValue::TensorList(items) => out.extend(items),
        tch::IValue::GenericDict(entries) => entries.into_iter().for_each(|(k, v)| {
            collect_tensors(k, out);
            collect_tensors(v, out);
        }),
        _ => {}
    }
}

pub(crate) fn torch_error(call: &'static str, e: tch::TchError) -> nimble_torch::NimbleError {
    nimble_torch::NimbleError::Torch { call, message: e.to_string() }
}
