//! `nimble_rs._sched`, the scheduling half of the Python package `nimble_rs`: the registry, plans,
//! regions and simulations on task graphs given as JSON text. It links no libtorch (no tch), so
//! it loads beside any torch: `import nimble_rs` and `torch.compile(backend="nimble")` work with
//! the user's torch, and only `nimble_rs.Nimble` needs the libtorch engine (`nimble_rs_engine`,
//! in `engine/`, built for torch 2.11.0 exactly). The engine uses this crate's errors and plan
//! JSON as a library.

pub mod errors;
pub mod scheduling;

use pyo3::prelude::*;

#[pymodule]
fn _sched(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_function(wrap_pyfunction!(scheduling::algorithms_list, module)?)?;
    module.add_function(wrap_pyfunction!(scheduling::assign_json, module)?)?;
    module.add_function(wrap_pyfunction!(scheduling::simulate_json, module)?)?;
    module.add_function(wrap_pyfunction!(scheduling::regions_json, module)?)?;
    Ok(())
}
