//! Values between Python and Rust: torch tensors (the same `at::Tensor` on both sides, through
//! pyo3-tch) and the module's output structure (tuples, lists, dicts, `None`, constants).

use nimble_torch::Value;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use pyo3::IntoPyObjectExt;
use pyo3_tch::PyTensor;
use tch::Tensor;

/// The forward's inputs: every item must be a `torch.Tensor`.
pub fn tensors(inputs: &Bound<'_, PyTuple>) -> PyResult<Vec<Tensor>> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, item)| match item.extract::<PyTensor>() {
            Ok(tensor) => Ok(tensor.0),
            Err(_) => Err(PyTypeError::new_err(format!(
                "input {i}: expected a torch.Tensor, got {} (Nimble's forward takes tensors only; bind other arguments in the module)",
                item.get_type()
            ))),
        })
        .collect()
}

/// `tensors` as Python tensors, in a list.
pub fn tensor_list(py: Python<'_>, tensors: Vec<Tensor>) -> PyResult<PyObject> {
    let items = tensors
        .into_iter()
        .map(|t| PyTensor(t).into_py_any(py))
        .collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any().unbind())
}

/// A forward's output as the Python structure it was in the module; `copy` makes every tensor
/// a copy (the graph's own output buffers are overwritten by the next replay).
pub fn value(py: Python<'_>, v: &Value, copy: bool) -> PyResult<PyObject> {
    Ok(match v {
        Value::Tensor(t) => {
            PyTensor(if copy { t.copy() } else { t.shallow_clone() }).into_py_any(py)?
        }
        Value::None => py.None(),
        Value::Bool(b) => b.into_py_any(py)?,
        Value::Int(i) => i.into_py_any(py)?,
        Value::Float(x) => x.into_py_any(py)?,
        Value::Str(s) => s.into_py_any(py)?,
        Value::Tuple(items) => PyTuple::new(py, values(py, items, copy)?)?
            .into_any()
            .unbind(),
        Value::List(items) => PyList::new(py, values(py, items, copy)?)?
            .into_any()
            .unbind(),
        Value::Dict(entries) => {
            let dict = PyDict::new(py);
            for (k, item) in entries {
                dict.set_item(value(py, k, copy)?, value(py, item, copy)?)?;
            }
            dict.into_any().unbind()
        }
    })
}

fn values(py: Python<'_>, items: &[Value], copy: bool) -> PyResult<Vec<PyObject>> {
    items.iter().map(|item| value(py, item, copy)).collect()
}
