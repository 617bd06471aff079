//! Rust errors as Python exceptions: each error becomes an instance of a class of
//! `nimble_rs.errors` (all subclasses of `NimbleError`, a `RuntimeError`; bad input also a
//! `ValueError`), with the Rust error's message. The engine maps nimble-torch's errors onto the
//! same classes.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

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

/// Bad input the caller gave (a graph, an algorithm's name, a mode).
pub fn input_error(message: impl ToString) -> PyErr {
    raise("NimbleInputError", message.to_string())
}
