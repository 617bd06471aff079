//! Which parts of the CLI run models (and so need libtorch, the `torch` feature), and the error a
//! build without it gives for them.
//!
//! Without the feature the CLI keeps everything that works on task graphs alone: the schedulers,
//! the checker, the simulator, synthetic graphs, the synthetic-kernel GPU runs and every figure
//! re-rendered from its committed record.

/// The subcommands that exist only with the `torch` feature.
pub const COMMANDS: &[&str] = &["models", "export-graph", "infer", "profile", "train", "train-rank", "allreduce", "allreduce-rank"];

/// Whether this build has libtorch.
pub const PRESENT: bool = cfg!(feature = "torch");

/// The error for `what` (a command, or one use of it) in a build without libtorch.
pub fn missing(what: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "{what} runs models, which needs libtorch: this nimble-bench was built without the `torch` feature \
         (--no-default-features); build it with the default features (`scripts/setup-libtorch.sh && cargo run --release -p nimble-bench -- …`)"
    )
}

/// Whether a figure command can measure here; the reason when it cannot.
pub fn can_measure() -> Result<(), &'static str> {
    #[cfg(feature = "torch")]
    {
        if nimble_torch::cuda_available() {
            Ok(())
        } else {
            Err("no CUDA GPU here")
        }
    }
    #[cfg(not(feature = "torch"))]
    {
        Err("built without the `torch` feature (no libtorch)")
    }
}
