//! `experiments`: the paper's experiments and their result records.
//!
//! Each experiment defines what it measures, runs it through the lower crates, and writes a
//! record with [provenance](record::Provenance) that `paper-figs/results/` keeps. It holds the
//! [simulator validation](simulator_validation), the paper's [model zoo](models) (each model
//! checked against its PyTorch reference), the [inference comparison](inference) over zoo
//! models and [any TorchScript file](torchscript), the [coverage](coverage) of a whole population
//! of exported models, the [scheduler study](schedulers) and
//! [training](training).

pub mod coverage;
pub mod inference;
pub mod models;
pub mod record;
pub mod schedulers;
pub mod simulator_validation;
pub mod torchscript;
pub mod training;
