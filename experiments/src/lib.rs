//! `experiments`: the paper's experiments and their result records.
//!
//! Each experiment defines what it measures, runs it through the lower crates, and writes a
//! record with [provenance](record::Provenance) that `paper-figs/results/` keeps. It holds the
//! [simulator validation](simulator_validation), the [models](models) tch::vision provides, and
//! the [inference comparison](inference); the NAS models and training come with their issues.

pub mod inference;
pub mod models;
pub mod record;
pub mod simulator_validation;
