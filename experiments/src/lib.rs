//! `experiments`: the paper's experiments and their result records.
//!
//! Each experiment defines what it measures, runs it through the lower crates, and writes a
//! record with [provenance](record::Provenance) that `paper-figs/results/` keeps. It holds the
//! [simulator validation](simulator_validation), the paper's [model zoo](models) (each model
//! checked against its PyTorch reference), the [inference comparison](inference) over zoo
//! models and [any TorchScript file](torchscript) (with each model's [floor](floor)), the
//! [coverage](coverage) of a whole population of exported models, the [scheduler study](schedulers),
//! [training](training) and its [data-parallel scaling](scaling).
//!
//! Everything that runs a model needs libtorch and sits behind the `torch` feature (on by
//! default); without it the crate keeps the simulator validation, the coverage record's logic,
//! the tolerances, the records' provenance and the [zoo](zoo)'s names, and builds with no libtorch.

pub mod coverage;
#[cfg(feature = "torch")]
pub mod floor;
#[cfg(feature = "torch")]
pub mod inference;
#[cfg(feature = "torch")]
pub mod models;
pub mod record;
pub mod scaling;
pub mod scaling_model;
#[cfg(feature = "torch")]
pub mod schedulers;
pub mod simulator_validation;
#[cfg(feature = "torch")]
pub mod subject;
pub mod tolerance;
#[cfg(feature = "torch")]
pub mod torchscript;
#[cfg(feature = "torch")]
pub mod training;
pub mod zoo;
