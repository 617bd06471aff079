//! The layout trial: for models with convolutions neither NCHW nor NHWC wins everywhere (cuDNN's
//! grouped kernels, large first convolutions, small feature maps at batch 1), so `prepare`
//! builds the inference pipeline for both, times both graphs, and keeps the faster. It doubles
//! prepare's time, so it runs where it mattered most: for every model with grouped
//! convolutions, and for others when their first prepare was short.

use std::time::Instant;

use tch::Tensor;

use crate::cuda::cuda_time;
use crate::error::Result;
use crate::ffi::{self, Applied};
use crate::inference;
use crate::options::{LayoutTrial, PrepareOptions};
use crate::replay::Prepared;
use crate::source::Source;

/// The layout trial: per layout, `rounds` blocks of `warmup` untimed and `timed` timed replays,
/// the layouts' blocks alternating, so that a drift in the GPU's clocks over the trial favours
/// neither.
struct TrialBlocks {
    rounds: usize,
    warmup: usize,
    timed: usize,
}
const LAYOUT_TRIAL: TrialBlocks = TrialBlocks { rounds: 3, warmup: 10, timed: 20 };

/// A model without grouped convolutions gets a layout trial when its first prepare took less than
/// this: the trial then keeps its prepare under about a second. (On the H200 at batch 1, NHWC made
/// AlexNet 21% slower, prepared in 0.13 s; ResNet-50, prepared in 0.8 s, takes a third less time
/// in NHWC, its default.)
pub(crate) const TRIAL_BELOW_SECONDS: f64 = 0.5;

/// Whether `prepare` should also try the other layout, for a model whose rewrites did `applied`
/// and whose first prepare took `first_seconds`. Never where the layout was kept for eager's
/// numbers (a half-precision model with one convolution).
pub(crate) fn worth_a_trial(applied: &Applied, first_seconds: f64) -> bool {
    applied.convs && !applied.layout_for_numbers && (applied.grouped_convs || first_seconds < TRIAL_BELOW_SECONDS)
}

/// Prepares the other layout than `first`'s (`first_nhwc`: whether `first` is channels-last),
/// times both, and returns the faster with both times in its report (`first` alone, without a
/// trial, when the model cannot run in the other layout). The other graph is dropped
/// before this returns, so its memory goes back to the allocator.
pub(crate) fn keep_faster(source: &Source, inputs: &[Tensor], options: &PrepareOptions, first: Prepared, first_nhwc: bool) -> Result<Prepared> {
    let started = Instant::now();
    let first_seconds = first.report.seconds.total;
    // A layout the model cannot run in (a `view` of a channels-last output) leaves the other.
    let Ok((second, _)) = inference::prepare(source, inputs, &options.clone().channels_last(Some(!first_nhwc))) else {
        return Ok(first);
    };
    let candidates = [first, second];
    let mut samples = [Vec::new(), Vec::new()];
    for _ in 0..LAYOUT_TRIAL.rounds {
        for (prepared, samples) in candidates.iter().zip(samples.iter_mut()) {
            samples.extend(time_replays(prepared, inputs)?);
        }
    }
    let [first_us, second_us] = samples.map(|mut s| {
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    });
    let [first, second] = candidates;
    let (mut kept, dropped) = if second_us < first_us { (second, first) } else { (first, second) };
    drop(dropped);
    let (nchw_us, nhwc_us) = if first_nhwc { (second_us, first_us) } else { (first_us, second_us) };
    kept.report.layout_trial = Some(LayoutTrial { nchw_us, nhwc_us });
    // Steps are the kept graph's own; the total is the whole prepare's.
    let seconds = &mut kept.report.seconds;
    seconds.layout_trial = started.elapsed().as_secs_f64();
    seconds.total = first_seconds + seconds.layout_trial;
    Ok(kept)
}

/// One block of the trial: replays of `prepared` on `inputs` after warm-ups, each timed replay
/// in microseconds.
fn time_replays(prepared: &Prepared, inputs: &[Tensor]) -> Result<Vec<f64>> {
    for _ in 0..LAYOUT_TRIAL.warmup {
        prepared.forward(inputs)?;
    }
    let mut samples = Vec::with_capacity(LAYOUT_TRIAL.timed);
    for _ in 0..LAYOUT_TRIAL.timed {
        ffi::cuda_synchronize()?;
        samples.push(cuda_time(|| prepared.forward(inputs).map(drop))? * 1000.0);
    }
    Ok(samples)
}
