//! The crate's error type: every failure names what was wrong and, for bad input, what was
//! expected.

use thiserror::Error;

/// Result alias for this crate.
pub type Result<T, E = NimbleError> = std::result::Result<T, E>;

/// What can go wrong when tracing, preparing or running a model.
#[derive(Debug, Error)]
pub enum NimbleError {
    /// libtorch raised an exception in a shim call.
    #[error("libtorch ({call}): {message}")]
    Torch { call: &'static str, message: String },
    /// `prepare` needs a CUDA device and there is none.
    #[error("no CUDA device: libtorch reports CUDA unavailable (tracing and `task_graph` export still work on CPU tensors)")]
    NoCuda,
    /// The forward synchronizes with the host, which a CUDA graph cannot capture; `reason` says
    /// what kind of model does that ([`host_sync_reason`]).
    #[error("the forward synchronizes with the host at op #{index} ({op}, through {via}): {reason}; a CUDA graph cannot capture that (remove `.item()`, `nonzero`, printing or copies to the CPU from the forward)")]
    HostSync { index: usize, op: String, via: String, reason: String },
    /// The op sequence of a later pass differs from the traced one (data-dependent control flow).
    #[error("the model is not static: in the {pass} pass, {detail}")]
    OpMismatch { pass: &'static str, detail: String },
    /// `forward` got inputs that differ from the ones `prepare` saw.
    #[error("forward input {index}: {what} is {got}, expected {expected} (as at prepare; a prepared graph has fixed inputs)")]
    InputMismatch { index: usize, what: &'static str, expected: String, got: String },
    /// `forward` got the wrong number of inputs.
    #[error("forward got {got} input tensors, expected {expected} (as at prepare)")]
    InputCount { expected: usize, got: usize },
    /// Bad input to `prepare`, the trace or a loader.
    #[error("{0}")]
    InvalidInput(String),
    /// A training-prepared model used the wrong way (forward without gradients, `train_step`
    /// on a model prepared otherwise, …).
    #[error("{0}")]
    Training(String),
    /// `forward` before a successful `prepare`.
    #[error("the model is not prepared: call prepare first")]
    NotPrepared,
    /// The model's forward panicked (tch turns libtorch errors into panics).
    #[error("the model's forward failed in the {pass} pass: {message}")]
    ForwardFailed { pass: &'static str, message: String },
    /// The stream-assignment algorithm could not be built or run.
    #[error(transparent)]
    Schedule(#[from] nimble_sched::SchedError),
    /// The recorded graph is not a valid task graph (a bug in the dependency analysis).
    #[error(transparent)]
    Graph(#[from] nimble_graph::GraphError),
    /// An invariant of this crate broke.
    #[error("internal error: {0}")]
    Internal(String),
}

/// What a host synchronization at `op` (reached through `via`) means for the model, in words a
/// user recognizes: detection's non-maximum suppression and a mixture of experts' routing keep
/// a number of boxes or tokens per expert that only the data decides, so no such model can be
/// one CUDA graph (nor can `torch.compile` capture it); other ops read a value on the host.
pub fn host_sync_reason(op: &str, via: &str) -> String {
    let names = [op, via];
    let any = |patterns: &[&str]| names.iter().any(|name| patterns.iter().any(|p| name.contains(p)));
    if any(&["nms", "roi_align", "roi_pool"]) {
        "non-maximum suppression keeps a number of boxes only the data decides (detection models cannot be one CUDA graph)".into()
    } else if any(&["_grouped_mm", "moe", "expert"]) {
        "data-dependent expert routing: a mixture of experts sends each token to experts chosen at run time, so the work per expert is known only on the host".into()
    } else if any(&["nonzero", "masked_select", "unique", "repeat_interleave", "bincount", "histc"]) {
        "an op whose output size depends on the data".into()
    } else if any(&["item", "_local_scalar_dense", "is_nonzero", "equal"]) {
        "a value read on the host".into()
    } else {
        "a copy between the GPU and the host".into()
    }
}

#[cfg(test)]
mod tests {
    use super::host_sync_reason;

    #[test]
    fn host_syncs_say_what_kind_of_model_makes_them() {
        let cases = [
            ("aten::_grouped_mm", "aten::copy_", "data-dependent expert routing"),
            ("torchvision::nms", "aten::nonzero", "non-maximum suppression"),
            ("aten::nonzero", "aten::nonzero", "output size depends on the data"),
            ("aten::item", "aten::_local_scalar_dense", "a value read on the host"),
            ("aten::index", "aten::copy_", "a copy between the GPU and the host"),
        ];
        for (op, via, expected) in cases {
            assert!(host_sync_reason(op, via).contains(expected), "{op} via {via}: {}", host_sync_reason(op, via));
        }
    }
}
