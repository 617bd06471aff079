//! The optimizers of the training modes, with PyTorch's semantics, run as libtorch's fused
//! multi-tensor kernels: [`Optimizer`] (what to run), the state a captured step updates in
//! place, and [`FusedOptimizer`], the same update eagerly, for the autograd mode.

use tch::{Kind, Tensor};

use crate::error::{NimbleError, Result};
use crate::ffi::{self, AdamArgs, SgdArgs};

/// The optimizer of a whole training step, with PyTorch's (and tch's) semantics, run as
/// libtorch's fused multi-tensor kernels.
#[derive(Clone, Debug, PartialEq)]
pub enum Optimizer {
    Sgd { lr: f64, momentum: f64, dampening: f64, weight_decay: f64, nesterov: bool },
    Adam { lr: f64, beta1: f64, beta2: f64, eps: f64, weight_decay: f64 },
}

impl Optimizer {
    /// Plain SGD with learning rate `lr` (add momentum and weight decay with the setters).
    pub fn sgd(lr: f64) -> Self {
        Optimizer::Sgd { lr, momentum: 0.0, dampening: 0.0, weight_decay: 0.0, nesterov: false }
    }

    /// Adam with PyTorch's defaults (betas 0.9 and 0.999, eps 1e-8, no weight decay).
    pub fn adam(lr: f64) -> Self {
        Optimizer::Adam { lr, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0 }
    }

    /// SGD's momentum (ignored by Adam).
    pub fn momentum(mut self, value: f64) -> Self {
        if let Optimizer::Sgd { momentum, .. } = &mut self {
            *momentum = value;
        }
        self
    }

    /// SGD's Nesterov momentum (ignored by Adam).
    pub fn nesterov(mut self, on: bool) -> Self {
        if let Optimizer::Sgd { nesterov, .. } = &mut self {
            *nesterov = on;
        }
        self
    }

    /// L2 weight decay, added to the gradient (both optimizers).
    pub fn weight_decay(mut self, value: f64) -> Self {
        match &mut self {
            Optimizer::Sgd { weight_decay, .. } | Optimizer::Adam { weight_decay, .. } => *weight_decay = value,
        }
        self
    }

    pub(crate) fn check(&self) -> Result<()> {
        // False for NaN too.
        let non_negative = |x: f64| x >= 0.0;
        let bad = |what: &str, value: f64, expected: &str| Err(NimbleError::InvalidInput(format!("optimizer {what} is {value}, expected {expected}")));
        match *self {
            Optimizer::Sgd { lr, momentum, dampening, weight_decay, nesterov } => {
                if !non_negative(lr) {
                    return bad("learning rate", lr, "a number ≥ 0");
                }
                if !non_negative(momentum) {
                    return bad("momentum", momentum, "a number ≥ 0");
                }
                if nesterov && (momentum <= 0.0 || dampening != 0.0) {
                    return bad("dampening with Nesterov", dampening, "0, with momentum > 0");
                }
                if dampening != 0.0 {
                    // Momentum buffers start at zero in a captured step; PyTorch's first step
                    // equals that only without dampening.
                    return bad("dampening", dampening, "0 (a captured step starts its momentum buffers at zero)");
                }
                if !non_negative(weight_decay) {
                    return bad("weight decay", weight_decay, "a number ≥ 0");
                }
            }
            Optimizer::Adam { lr, beta1, beta2, eps, weight_decay } => {
                if !non_negative(lr) {
                    return bad("learning rate", lr, "a number ≥ 0");
                }
                if !(0.0..1.0).contains(&beta1) || !(0.0..1.0).contains(&beta2) {
                    return bad("beta", if (0.0..1.0).contains(&beta1) { beta2 } else { beta1 }, "in [0, 1)");
                }
                if !non_negative(eps) || !non_negative(weight_decay) {
                    return bad("eps or weight decay", if eps >= 0.0 { weight_decay } else { eps }, "a number ≥ 0");
                }
            }
        }
        Ok(())
    }
}

/// An optimizer that runs [`Optimizer`]'s update as libtorch's fused multi-tensor kernels, eagerly:
/// a drop-in for tch's optimizers (which launch a few kernels per parameter) next to the autograd
/// mode, where the optimizer is the largest eager cost left.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let vs = tch::nn::VarStore::new(tch::Device::Cuda(0));
/// # let loss = tch::Tensor::zeros([], (tch::Kind::Float, tch::Device::Cuda(0)));
/// use nimble_torch::{FusedOptimizer, Optimizer};
/// let mut opt = FusedOptimizer::new(vs.trainable_variables(), Optimizer::sgd(0.01).momentum(0.9))?;
/// opt.zero_grad()?;
/// loss.backward();
/// opt.step()?;
/// # Ok(()) }
/// ```
pub struct FusedOptimizer {
    params: Vec<Tensor>,
    state: OptimizerState,
}

impl FusedOptimizer {
    /// Over `params` (all on one device, float32); the state starts as PyTorch's does.
    pub fn new(params: Vec<Tensor>, optimizer: Optimizer) -> Result<FusedOptimizer> {
        optimizer.check()?;
        if let Some(first) = params.first() {
            if let Some(i) = params.iter().position(|p| p.device() != first.device() || p.kind() != first.kind()) {
                return Err(NimbleError::InvalidInput(format!(
                    "parameter {i} is {:?} on {:?}, expected {:?} on {:?} like parameter 0 (the fused kernels take one device and dtype)",
                    params[i].kind(),
                    params[i].device(),
                    first.kind(),
                    first.device()
                )));
            }
        }
        let state = OptimizerState::new(&optimizer, &params);
        Ok(FusedOptimizer { params, state })
    }

    /// One update of every parameter that has a gradient.
    pub fn step(&mut self) -> Result<()> {
        self.state.step(&self.params)
    }

    /// Sets the gradients to none (as PyTorch's and libtorch's `zero_grad` do by default).
    pub fn zero_grad(&mut self) -> Result<()> {
        ffi::grads_reset(&self.params)
    }
}

/// The optimizer's state tensors, allocated once so a captured step updates them in place.
pub(crate) enum OptimizerState {
    Sgd { args: SgdArgs, buffers: Vec<Tensor> },
    Adam { args: AdamArgs, exp_avgs: Vec<Tensor>, exp_avg_sqs: Vec<Tensor>, steps: Vec<Tensor> },
}

impl OptimizerState {
    pub(crate) fn new(optimizer: &Optimizer, params: &[Tensor]) -> OptimizerState {
        let zeros = || params.iter().map(Tensor::zeros_like).collect::<Vec<_>>();
        match *optimizer {
            Optimizer::Sgd { lr, momentum, dampening, weight_decay, nesterov } => OptimizerState::Sgd {
                args: SgdArgs { lr, momentum, dampening, weight_decay, nesterov },
                buffers: if momentum != 0.0 { zeros() } else { Vec::new() },
            },
            Optimizer::Adam { lr, beta1, beta2, eps, weight_decay } => OptimizerState::Adam {
                args: AdamArgs { lr, beta1, beta2, eps, weight_decay },
                exp_avgs: zeros(),
                exp_avg_sqs: zeros(),
                steps: params.iter().map(|p| Tensor::zeros([], (Kind::Float, p.device()))).collect(),
            },
        }
    }

    pub(crate) fn step(&self, params: &[Tensor]) -> Result<()> {
        match self {
            OptimizerState::Sgd { args, buffers } => ffi::sgd_step(params, buffers, args),
            OptimizerState::Adam { args, exp_avgs, exp_avg_sqs, steps } => ffi::adam_step(params, exp_avgs, exp_avg_sqs, steps, args),
        }
    }

    /// One update of the parameters `which` (indices into `params`, the list the state was made
    /// for); the others are left alone.
    pub(crate) fn step_some(&self, params: &[Tensor], which: &[usize]) -> Result<()> {
        if which.is_empty() {
            return Ok(());
        }
        let pick = |list: &[Tensor]| -> Vec<Tensor> { if list.is_empty() { Vec::new() } else { which.iter().map(|&i| list[i].shallow_clone()).collect() } };
        let params = pick(params);
        match self {
            OptimizerState::Sgd { args, buffers } => ffi::sgd_step(&params, &pick(buffers), args),
            OptimizerState::Adam { args, exp_avgs, exp_avg_sqs, steps } => ffi::adam_step(&params, &pick(exp_avgs), &pick(exp_avg_sqs), &pick(steps), args),
        }
    }

    /// Back to the state before any step.
    pub(crate) fn reset(&self) {
        let all: Vec<&Tensor> = match self {
            OptimizerState::Sgd { buffers, .. } => buffers.iter().collect(),
            OptimizerState::Adam { exp_avgs, exp_avg_sqs, steps, .. } => exp_avgs.iter().chain(exp_avg_sqs).chain(steps).collect(),
        };
        tch::no_grad(|| {
            for t in all {
                let _ = t.shallow_clone().zero_();
            }
        });
    }
}
