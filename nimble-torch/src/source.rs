//! Stage 0 of the pipeline, the source: the model as the user gave it (a forward written in Rust
//! over tch, or a TorchScript module) and the [`Runner`] that every later stage runs it through.

use std::panic::{catch_unwind, AssertUnwindSafe};

use tch::Tensor;

use crate::error::{NimbleError, Result};
use crate::ffi::JitModule;
use crate::output::Layout;
use crate::trace::panic_message;

/// A forward of tensors to tensors; the flag is tch's `train`.
pub(crate) type ForwardFn = Box<dyn Fn(&[Tensor], bool) -> Vec<Tensor>>;

/// The model as given.
pub(crate) enum Source {
    Rust(ForwardFn),
    TorchScript(JitModule),
}

impl Source {
    /// What runs the forward: the optimized module when the rewrites made one, else the source.
    pub(crate) fn runner<'a>(&'a self, optimized: Option<&'a JitModule>) -> Runner<'a> {
        match (optimized, self) {
            (Some(module), _) => Runner::Jit(module),
            (None, Source::TorchScript(module)) => Runner::Jit(module),
            (None, Source::Rust(f)) => Runner::Rust(f),
        }
    }

    /// The source as a TorchScript module: itself, or `traced` filled with a trace of the Rust
    /// forward on `inputs`.
    pub(crate) fn as_torchscript<'a>(&'a self, inputs: &[Tensor], traced: &'a mut Option<JitModule>) -> Result<&'a JitModule> {
        match self {
            Source::TorchScript(module) => Ok(module),
            Source::Rust(f) => Ok(traced.insert(trace_to_torchscript(f, inputs)?)),
        }
    }
}

/// What runs the forward after `prepare`'s optimization step.
pub(crate) enum Runner<'a> {
    Rust(&'a ForwardFn),
    Jit(&'a JitModule),
}

impl Runner<'_> {
    /// Runs for inference (gradients off, `train = false`) or, with `train`, for training
    /// (gradients on, `train = true`): the output's tensors, flat.
    pub(crate) fn run(&self, inputs: &[Tensor], train: bool) -> Result<Vec<Tensor>> {
        in_mode(train, || match self {
            Runner::Rust(f) => Ok(f(inputs, train)),
            Runner::Jit(m) => m.forward(inputs, train),
        })
    }

    /// [`Runner::run`], also returning how the output is put together around its tensors (a
    /// Rust forward returns a list of tensors: one tensor, or a tuple of them).
    pub(crate) fn run_structured(&self, inputs: &[Tensor], train: bool) -> Result<(Vec<Tensor>, Layout)> {
        match self {
            Runner::Rust(_) => {
                let tensors = self.run(inputs, train)?;
                let layout = Layout::of_list(tensors.len());
                Ok((tensors, layout))
            }
            Runner::Jit(m) => {
                let (tensors, text) = in_mode(train, || m.forward_structured(inputs, train))?;
                Ok((tensors, Layout::parse(&text)?))
            }
        }
    }

    /// Runs, turning a panic (tch's way to report libtorch errors) into an error.
    pub(crate) fn run_caught(&self, inputs: &[Tensor], train: bool, pass: &'static str) -> Result<Vec<Tensor>> {
        caught(pass, || self.run(inputs, train))
    }

    /// [`Runner::run_structured`] for inference, a panic turned into an error.
    pub(crate) fn run_structured_caught(&self, inputs: &[Tensor], pass: &'static str) -> Result<(Vec<Tensor>, Layout)> {
        caught(pass, || self.run_structured(inputs, false))
    }
}

/// Runs `f` with gradients on for training, off otherwise.
fn in_mode<T>(train: bool, f: impl FnOnce() -> T) -> T {
    if train {
        tch::with_grad(f)
    } else {
        tch::no_grad(f)
    }
}

fn caught<T>(pass: &'static str, body: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(result) => result,
        Err(panic) => Err(NimbleError::ForwardFailed { pass, message: panic_message(&panic) }),
    }
}

/// A TorchScript trace of the forward `f` (evaluation mode, gradients off) on `inputs`.
pub(crate) fn trace_to_torchscript(f: &ForwardFn, inputs: &[Tensor]) -> Result<JitModule> {
    let mut failure = None;
    let result = JitModule::trace(inputs, || {
        let out = tch::no_grad(|| catch_unwind(AssertUnwindSafe(|| f(inputs, false))));
        match out {
            Ok(tensors) => tensors,
            Err(panic) => {
                failure = Some(panic_message(&panic));
                Vec::new()
            }
        }
    });
    if let Some(message) = failure {
        return Err(NimbleError::ForwardFailed { pass: "TorchScript trace", message });
    }
    result
}
