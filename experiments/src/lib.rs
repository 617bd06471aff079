//! `experiments`: the paper's experiments and their result records.
//!
//! Each experiment defines what it measures, runs it through the lower crates, and writes a
//! record with [provenance](record::Provenance) that `paper-figs/results/` keeps. Today it holds
//! the [simulator validation](simulator_validation); the paper's model zoo and the inference
//! and training comparisons come with the nimble-torch issues.

pub mod record;
pub mod simulator_validation;
