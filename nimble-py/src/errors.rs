//! Rust errors as Python exceptions: each error becomes an instance of a class of
//! `nimble_rs.errors` (all subclasses of `NimbleError`, a `RuntimeError`; bad input also a
//! `ValueError`), with the Rust error's message.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

/// The `nimble_rs.errors` class for a nimble-torch error.
fn class_of(error: &nimble_torch::NimbleError) -> &'static str {
    use nimble_torch::NimbleError as E;
    match error {
        E::InvalidInput(_) | E::InputMismatch { .. } | E::InputCount { .. } | E::Schedule(_) => {
            "NimbleInputError"
        }
        E::HostSync { .. } => "HostSyncError",
        E::OpMismatch { .. } => "DynamicModelError",
        E::NoCuda => "NoCudaError",
        E::NotPrepared => "NotPreparedError",
        _ => "NimbleError",
    }
}

/// An exception of class `class` of `nimble_rs.errors` with `message`.
pub fn raise(class: &str, message: String) -> PyErr {
    Python::with_gil(|py| {
        let made = py
            .import("nimble_rs.errors")
            .and_then(|m| m.getattr(class))
            .and_then(|c| c.call1((message.clone(),)));
        match made {
            Ok(instance) => PyErr::from_value(instance),
            // The package's Python half is missing (the extension imported on its own).
            Err(_) => PyRuntimeError::new_err(message),
        }
    })
}

/// A nimble-torch error as its Python exception.
pub fn torch_error(error: nimble_torch::NimbleError) -> PyErr {
    raise(class_of(&error), error.to_string())
}

/// Bad input the caller gave (a graph, an algorithm's name, a mode).
pub fn input_error(message: impl ToString) -> PyErr {
    raise("NimbleInputError", message.to_string())
}
