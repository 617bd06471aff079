//! `nimble_rs_engine`, the libtorch engine of the Python package `nimble_rs` (whose Python half,
//! in `../python/nimble_rs`, traces `torch.nn.Module`s, checks the torch version before loading
//! this and defines the exceptions). A `Native` holds a nimble-torch `Nimble` loaded from a
//! TorchScript file; tensors cross as the same `at::Tensor` through pyo3-tch, without copies.
//! Built against libtorch 2.11.0: it loads only into a Python whose torch is 2.11.0.

mod convert;
mod errors;
mod nogil;

use errors::torch_error;
use nimble_py::errors::input_error;
use nimble_py::{errors as shared_errors, scheduling};
use nimble_torch::{Nimble, PrepareOptions};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use tch::Device;

/// A model loaded from TorchScript, prepared by `prepare`. Not shared between threads (a
/// prepared CUDA graph belongs to the thread that captured it).
#[pyclass(unsendable, module = "nimble_rs_engine")]
struct Native {
    inner: Nimble,
}

/// `cpu`, `cuda` or `cuda:N`, as torch writes a device.
fn device(name: &str) -> PyResult<Device> {
    match name {
        "cpu" => Ok(Device::Cpu),
        "cuda" => Ok(Device::Cuda(0)),
        _ => name
            .strip_prefix("cuda:")
            .and_then(|i| i.parse().ok())
            .map(Device::Cuda)
            .ok_or_else(|| {
                input_error(format!(
                    "device `{name}` is not supported: expected cpu, cuda or cuda:N"
                ))
            }),
    }
}

#[pymethods]
impl Native {
    /// Loads a `torch.jit.save`d module onto `device`.
    #[staticmethod]
    fn load(path: &str, device_name: &str) -> PyResult<Native> {
        Ok(Native {
            inner: Nimble::from_torchscript(path, device(device_name)?).map_err(torch_error)?,
        })
    }

    /// Makes the module read the caller's tensors: `tensors[i]` becomes its parameter or
    /// buffer `names[i]` (see `Nimble::bind_tensors`).
    fn bind(&mut self, names: Vec<String>, tensors: &Bound<'_, PyTuple>) -> PyResult<()> {
        let tensors = convert::tensors(tensors)?;
        if names.len() != tensors.len() {
            return Err(input_error(format!("{} names for {} tensors", names.len(), tensors.len())));
        }
        let named: Vec<(String, tch::Tensor)> = names.into_iter().zip(tensors).collect();
        self.inner.bind_tensors(&named).map_err(torch_error)
    }

    /// The forward's arguments after `self`: `(name, type, has_default)` each.
    fn arguments(&self) -> PyResult<Vec<(String, String, bool)>> {
        Ok(self
            .inner
            .torchscript_arguments()
            .map_err(torch_error)?
            .unwrap_or_default())
    }

    /// Prepares the multi-stream CUDA graph; the report as JSON.
    #[pyo3(signature = (inputs, algorithm, optimize, channels_last, training, fold_half_precision=false))]
    fn prepare(
        &mut self,
        py: Python<'_>,
        inputs: &Bound<'_, PyTuple>,
        algorithm: &str,
        optimize: bool,
        channels_last: Option<bool>,
        training: bool,
        fold_half_precision: bool,
    ) -> PyResult<String> {
        let inputs = convert::tensors(inputs)?;
        let base = if training {
            PrepareOptions::training()
        } else {
            PrepareOptions::inference()
        };
        let options = base
            .algorithm(algorithm)
            .optimize(optimize)
            .channels_last(channels_last)
            .fold_half_precision(fold_half_precision);
        // Training runs autograd's backward, which libtorch refuses under the GIL.
        let inner = &mut self.inner;
        let report = nogil::without_gil(py, move || inner.prepare(&inputs, options).map(|r| r.clone()))
            .map_err(torch_error)?;
        serde_json::to_string(&report)
            .map_err(|e| shared_errors::raise("NimbleError", format!("writing the report: {e}")))
    }

    /// Replays the prepared graph on `inputs`; the output in the module's structure, its
    /// tensors the graph's own buffers (`copy`: copies of them).
    #[pyo3(signature = (inputs, copy))]
    fn forward(
        &self,
        py: Python<'_>,
        inputs: &Bound<'_, PyTuple>,
        copy: bool,
    ) -> PyResult<PyObject> {
        let inputs = convert::tensors(inputs)?;
        let value = self.inner.forward_value(&inputs).map_err(torch_error)?;
        convert::value(py, &value, copy)
    }

    /// The module's own forward (TorchScript, op by op), in its structure.
    fn eager(&self, py: Python<'_>, inputs: &Bound<'_, PyTuple>) -> PyResult<PyObject> {
        let inputs = convert::tensors(inputs)?;
        let value = self.inner.eager_value(&inputs).map_err(torch_error)?;
        convert::value(py, &value, false)
    }

    /// The forward after the inference rewrites, run once op by op (CPU too); its tensors, flat.
    fn run_optimized(&self, py: Python<'_>, inputs: &Bound<'_, PyTuple>) -> PyResult<PyObject> {
        let inputs = convert::tensors(inputs)?;
        let outputs = self.inner.run_optimized(&inputs).map_err(torch_error)?;
        convert::tensor_list(py, outputs)
    }

    /// The task graph of one forward on `inputs`, recorded without preparing (CPU too), as JSON.
    fn trace_graph(&self, inputs: &Bound<'_, PyTuple>, optimize: bool) -> PyResult<String> {
        let inputs = convert::tensors(inputs)?;
        let trace = self.inner.trace(&inputs, optimize).map_err(torch_error)?;
        Ok(trace.task_graph().map_err(torch_error)?.to_json_string())
    }

    /// The prepared task graph as JSON, or `None` before `prepare`.
    fn task_graph(&self) -> Option<String> {
        self.inner.task_graph().map(|g| g.to_json_string())
    }

    /// The prepared plan as JSON, or `None` before `prepare`.
    fn plan(&self) -> Option<String> {
        Some(scheduling::plan_json(
            self.inner.task_graph()?,
            self.inner.plan()?,
        ))
    }
}

#[pymodule]
fn nimble_rs_engine(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Native>()?;
    module.add("LIBTORCH_VERSION", "2.11.0")?;
    Ok(())
}
