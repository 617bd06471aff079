//! nimble-torch's errors as Python exceptions of `nimble_rs.errors` (the scheduling crate's
//! `raise`), each by its kind.

use nimble_py::errors::raise;
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

/// A nimble-torch error as its Python exception.
pub fn torch_error(error: nimble_torch::NimbleError) -> PyErr {
    raise(class_of(&error), error.to_string())
}
