//! The checks' tolerances and the libtorch version, which records that need no libtorch read too
//! (the coverage record, figures re-rendered without the `torch` feature).

/// The libtorch every measurement runs on (torch-sys =0.24.0 refuses any other).
pub const LIBTORCH_VERSION: &str = "2.11.0";

/// In float16 and bfloat16 a value carries 11 and 8 significant bits (relative steps of 5e-4 and
/// 4e-3), and the same graph may pick other cuDNN algorithms than eager did, whose sums round
/// differently in every layer; folded BatchNorm weights round once more.
pub const LOW_PRECISION_TOLERANCE: f64 = 5e-2;

/// Largest relative error against eager tch that a measured configuration may show.
pub const RAW_TOLERANCE: f64 = 1e-5;
pub const OPTIMIZED_TOLERANCE: f64 = 1e-2;
/// TorchScript's executor may fuse element-wise ops, which rounds differently.
pub const TORCHSCRIPT_TOLERANCE: f64 = 1e-3;
