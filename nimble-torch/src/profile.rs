//! What the GPU ran: a device-side profile of any code, CUDA graph replays included, taken with
//! libtorch's Kineto profiler (CUPTI underneath), and the summaries a scheduling study needs:
//! per run, how long the device was busy against how long the run spanned (the rest is launch
//! latency and dependency gaps), and per kernel name, how often and how long it ran.
//!
//! ```no_run
//! # fn main() -> nimble_torch::Result<()> {
//! # let nimble: nimble_torch::Nimble = unimplemented!();
//! # let input: tch::Tensor = unimplemented!();
//! let ((), profile) = nimble_torch::profile(None, || {
//!     for _ in 0..10 {
//!         nimble.forward(std::slice::from_ref(&input))?;
//!         nimble_torch::cuda_synchronize()?;
//!         std::thread::sleep(std::time::Duration::from_millis(2)); // runs apart
//!     }
//!     Ok(())
//! })?;
//! let runs = profile.runs(1_000_000);
//! # Ok(()) }
//! ```
//!
//! CUPTI's tracing itself costs time between kernels, so a profiled run spans longer than an
//! unprofiled one; kernel durations are the device's own.

use std::path::Path;

use serde::Serialize;

use crate::error::{NimbleError, Result};
use crate::ffi;

/// What kind of work the device did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ActivityKind {
    Kernel,
    Memcpy,
    Memset,
}

/// One piece of device work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Activity {
    pub kind: ActivityKind,
    pub name: String,
    /// Start on the profiler's clock, nanoseconds.
    pub start_ns: u64,
    pub duration_ns: u64,
    /// The CUDA stream it ran on (CUPTI's stream id).
    pub stream: i64,
    /// A kernel's launch configuration, when the profiler reported it.
    pub launch: Option<KernelLaunch>,
}

/// How a kernel was launched: what decides how much of the GPU it can occupy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct KernelLaunch {
    pub grid: [u64; 3],
    pub block: [u64; 3],
    pub registers_per_thread: u64,
    /// Static and dynamic shared memory per block, bytes.
    pub shared_memory: u64,
}

impl KernelLaunch {
    /// Reads Kineto's metadata fragment (`"grid": [x, y, z], "block": [..], "registers per
    /// thread": r, "shared memory": s, …`, without braces); `None` when it is not a kernel's.
    fn from_metadata(fragment: &str) -> Option<KernelLaunch> {
        if fragment.trim().is_empty() {
            return None;
        }
        let value: serde_json::Value = serde_json::from_str(&format!("{{{fragment}}}")).ok()?;
        let dims = |key: &str| -> Option<[u64; 3]> {
            let list = value.get(key)?.as_array()?;
            let mut out = [1u64; 3];
            for (slot, v) in out.iter_mut().zip(list) {
                *slot = v.as_u64()?;
            }
            Some(out)
        };
        let number = |key: &str| value.get(key).and_then(serde_json::Value::as_u64).unwrap_or(0);
        Some(KernelLaunch { grid: dims("grid")?, block: dims("block")?, registers_per_thread: number("registers per thread"), shared_memory: number("shared memory") })
    }

    pub fn blocks(&self) -> u64 {
        self.grid.iter().product()
    }

    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().product()
    }

    /// The share of the GPU's block slots the kernel's grid fills at once, in (0, 1]: its
    /// blocks over how many can be resident on the whole GPU, where a multiprocessor holds as
    /// many blocks as its thread, register, shared-memory and block limits allow (allocation
    /// granularity ignored); 1 when the grid fills the GPU (a wave or more). What the
    /// simulator's `sm_share` estimates.
    pub fn sm_share(&self, sm: &SmLimits) -> f64 {
        let threads = self.threads_per_block().max(1);
        let mut per_sm = sm.max_blocks.min(sm.max_threads / threads);
        if let Some(limit) = sm.registers.checked_div(self.registers_per_thread * threads) {
            per_sm = per_sm.min(limit);
        }
        if let Some(limit) = sm.shared_memory.checked_div(self.shared_memory) {
            per_sm = per_sm.min(limit);
        }
        let resident = (sm.multiprocessors * per_sm.max(1)) as f64;
        (self.blocks().max(1) as f64 / resident).min(1.0)
    }
}

/// What one multiprocessor holds at once, and how many the GPU has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SmLimits {
    pub multiprocessors: u64,
    pub max_threads: u64,
    pub max_blocks: u64,
    pub registers: u64,
    /// Shared memory per multiprocessor, bytes.
    pub shared_memory: u64,
}

impl SmLimits {
    /// The limits of CUDA `device`.
    pub(crate) fn of_device(device: usize) -> crate::Result<SmLimits> {
        let [multiprocessors, max_threads, max_blocks, registers, shared_memory] = ffi::sm_limits(device)?;
        Ok(SmLimits { multiprocessors, max_threads, max_blocks, registers, shared_memory })
    }
}

impl Activity {
    pub fn end_ns(&self) -> u64 {
        self.start_ns + self.duration_ns
    }
}

/// Everything the device ran while the profiler was on, in start order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DeviceProfile {
    pub activities: Vec<Activity>,
}

/// One run: a stretch of device work with no idle gap of the splitting length inside.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunStats {
    pub activities: usize,
    pub kernels: usize,
    /// First start to last end.
    pub span_us: f64,
    /// Time at least one activity was running (the union of their intervals).
    pub busy_us: f64,
    /// The activities' durations summed (more than `busy_us` where they overlapped).
    pub work_us: f64,
    /// Distinct streams used.
    pub streams: usize,
}

/// Totals per kernel (or copy) name over a whole profile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NameStats {
    pub kind: ActivityKind,
    pub name: String,
    pub count: usize,
    pub total_us: f64,
    pub mean_us: f64,
}

impl DeviceProfile {
    /// Parses the shim's lines: `kind \t start_ns \t duration_ns \t stream \t name`, then
    /// optionally `\t metadata` (Kineto's JSON fragment, read for a kernel's launch).
    pub fn parse(text: &str) -> Result<DeviceProfile> {
        let bad = |line: &str, what: &str| NimbleError::Internal(format!("device profile line {line:?}: {what}"));
        let mut activities = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let fields: Vec<&str> = line.splitn(6, '\t').collect();
            let (kind, start, duration, stream, name, metadata) = match fields[..] {
                [kind, start, duration, stream, name] => (kind, start, duration, stream, name, ""),
                [kind, start, duration, stream, name, metadata] => (kind, start, duration, stream, name, metadata),
                _ => return Err(bad(line, "expected 5 or 6 tab-separated fields (kind, start, duration, stream, name, metadata)")),
            };
            let kind = match kind {
                "kernel" => ActivityKind::Kernel,
                "memcpy" => ActivityKind::Memcpy,
                "memset" => ActivityKind::Memset,
                other => return Err(bad(line, &format!("unknown kind `{other}`, expected kernel, memcpy or memset"))),
            };
            let number = |s: &str, what: &str| s.parse::<u64>().map_err(|_| bad(line, &format!("{what} `{s}` is not a whole number")));
            activities.push(Activity {
                kind,
                name: name.to_string(),
                start_ns: number(start, "start")?,
                duration_ns: number(duration, "duration")?,
                stream: stream.parse().map_err(|_| bad(line, &format!("stream `{stream}` is not an integer")))?,
                launch: if kind == ActivityKind::Kernel { KernelLaunch::from_metadata(metadata) } else { None },
            });
        }
        activities.sort_by_key(|a| (a.start_ns, a.end_ns()));
        Ok(DeviceProfile { activities })
    }

    /// Splits the profile into runs wherever the device sat idle for at least `gap_ns`, and
    /// describes each. Leave the runs well apart (synchronize and sleep between them) and pick a
    /// gap far longer than any inside a run.
    pub fn runs(&self, gap_ns: u64) -> Vec<RunStats> {
        let mut runs = Vec::new();
        let mut current: Vec<&Activity> = Vec::new();
        let mut end = 0;
        for activity in &self.activities {
            if !current.is_empty() && activity.start_ns >= end + gap_ns {
                runs.push(run_stats(&current));
                current.clear();
            }
            end = if current.is_empty() { activity.end_ns() } else { end.max(activity.end_ns()) };
            current.push(activity);
        }
        if !current.is_empty() {
            runs.push(run_stats(&current));
        }
        runs
    }

    /// Totals per name, the largest total first.
    pub fn by_name(&self) -> Vec<NameStats> {
        let mut totals: std::collections::BTreeMap<(ActivityKind, &str), (usize, u64)> = Default::default();
        for a in &self.activities {
            let entry = totals.entry((a.kind, &a.name)).or_default();
            entry.0 += 1;
            entry.1 += a.duration_ns;
        }
        let mut stats: Vec<NameStats> = totals
            .into_iter()
            .map(|((kind, name), (count, ns))| NameStats { kind, name: name.to_string(), count, total_us: ns as f64 / 1e3, mean_us: ns as f64 / 1e3 / count as f64 })
            .collect();
        stats.sort_by(|a, b| b.total_us.total_cmp(&a.total_us).then_with(|| a.name.cmp(&b.name)));
        stats
    }
}

/// How one kind of device work (collectives, say) sat against the rest.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Overlap {
    /// Time some activity of the kind ran (the union of their intervals), µs.
    pub busy_us: f64,
    /// Time some other activity ran, µs.
    pub others_busy_us: f64,
    /// Time the kind ran while nothing else did: what overlap did not hide, µs.
    pub exposed_us: f64,
}

impl DeviceProfile {
    /// The activities `of_kind` picks against all the others (see [`Overlap`]).
    pub fn overlap(&self, of_kind: impl Fn(&Activity) -> bool) -> Overlap {
        let (mut mine, mut others) = (Vec::new(), Vec::new());
        for a in &self.activities {
            if of_kind(a) { &mut mine } else { &mut others }.push((a.start_ns, a.end_ns()));
        }
        let (mine, others) = (merged(mine), merged(others));
        let length = |v: &[(u64, u64)]| v.iter().map(|(s, e)| e - s).sum::<u64>();
        // Both unions are sorted and disjoint: intersect them in one sweep.
        let (mut i, mut j, mut shared) = (0, 0, 0u64);
        while i < mine.len() && j < others.len() {
            let (start, end) = (mine[i].0.max(others[j].0), mine[i].1.min(others[j].1));
            shared += end.saturating_sub(start);
            if mine[i].1 < others[j].1 { i += 1 } else { j += 1 }
        }
        let busy = length(&mine);
        Overlap { busy_us: busy as f64 / 1e3, others_busy_us: length(&others) as f64 / 1e3, exposed_us: (busy - shared) as f64 / 1e3 }
    }
}

/// The union of `intervals` as sorted, disjoint intervals.
fn merged(mut intervals: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    intervals.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(intervals.len());
    for (start, end) in intervals {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

fn run_stats(activities: &[&Activity]) -> RunStats {
    let start = activities.iter().map(|a| a.start_ns).min().unwrap_or(0);
    let end = activities.iter().map(|a| a.end_ns()).max().unwrap_or(0);
    // Activities come in start order, so the union is one sweep.
    let (mut busy, mut covered_to) = (0u64, start);
    for a in activities {
        if a.end_ns() > covered_to {
            busy += a.end_ns() - a.start_ns.max(covered_to);
            covered_to = a.end_ns();
        }
    }
    let mut streams: Vec<i64> = activities.iter().map(|a| a.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    RunStats {
        activities: activities.len(),
        kernels: activities.iter().filter(|a| a.kind == ActivityKind::Kernel).count(),
        span_us: (end - start) as f64 / 1e3,
        busy_us: busy as f64 / 1e3,
        work_us: activities.iter().map(|a| a.duration_ns).sum::<u64>() as f64 / 1e3,
        streams: streams.len(),
    }
}

/// Runs `body` with the device profiler on and returns its result with what the device ran;
/// waits for the device (when there is one) before stopping. `chrome_trace`: also write the whole trace there
/// (chrome://tracing or Perfetto). The profiler is stopped whether `body` succeeds or not.
pub fn profile<T>(chrome_trace: Option<&Path>, body: impl FnOnce() -> Result<T>) -> Result<(T, DeviceProfile)> {
    let path = chrome_trace
        .map(|p| p.to_str().ok_or_else(|| NimbleError::Internal(format!("the trace path {} is not UTF-8", p.display()))))
        .transpose()?;
    ffi::profile_begin()?;
    let result = body().and_then(|value| if crate::cuda_available() { ffi::cuda_synchronize().map(|()| value) } else { Ok(value) });
    let text = ffi::profile_end(if result.is_ok() { path } else { None });
    let value = result?;
    Ok((value, DeviceProfile::parse(&text?)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: &str, start: u64, duration: u64, stream: i64, name: &str) -> String {
        format!("{kind}\t{start}\t{duration}\t{stream}\t{name}\n")
    }

    #[test]
    fn runs_split_at_idle_gaps_and_count_overlap_once() {
        let text = [
            line("kernel", 1_000, 500, 7, "a"),
            line("kernel", 1_200, 600, 8, "b"), // overlaps a: busy 1000..1800
            line("memcpy", 2_000, 100, 7, "Memcpy DtoD"),
            line("kernel", 1_000_000, 300, 7, "a"), // second run
            line("kernel", 1_000_400, 300, 7, "a"),
        ]
        .concat();
        let profile = DeviceProfile::parse(&text).unwrap();
        let runs = profile.runs(100_000);
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].activities, runs[0].kernels, runs[0].streams), (3, 2, 2));
        assert!((runs[0].span_us - 1.1).abs() < 1e-9, "{:?}", runs[0]);
        assert!((runs[0].busy_us - 0.9).abs() < 1e-9, "{:?}", runs[0]);
        assert!((runs[0].work_us - 1.2).abs() < 1e-9, "{:?}", runs[0]);
        assert!((runs[1].span_us - 0.7).abs() < 1e-9 && (runs[1].busy_us - 0.6).abs() < 1e-9, "{:?}", runs[1]);
        let names = profile.by_name();
        assert_eq!((names[0].name.as_str(), names[0].count), ("a", 3));
        assert!((names[0].total_us - 1.1).abs() < 1e-9 && (names[0].mean_us - 1.1 / 3.0).abs() < 1e-9);
        assert_eq!(names.last().unwrap().kind, ActivityKind::Memcpy);
    }

    #[test]
    fn overlap_counts_what_nothing_else_hid() {
        let text = [
            line("kernel", 0, 100, 1, "conv"),
            line("kernel", 50, 100, 9, "ncclAllReduce"), // 50..100 hidden by conv, 100..150 exposed
            line("kernel", 120, 40, 1, "relu"),          // hides 120..150 after all
            line("kernel", 200, 50, 9, "ncclAllReduce"), // exposed
        ]
        .concat();
        let profile = DeviceProfile::parse(&text).unwrap();
        let o = profile.overlap(|a| a.name.starts_with("nccl"));
        assert!((o.busy_us - 0.15).abs() < 1e-9, "{o:?}");
        assert!((o.others_busy_us - 0.14).abs() < 1e-9, "{o:?}");
        assert!((o.exposed_us - 0.07).abs() < 1e-9, "{o:?}");
        assert_eq!(DeviceProfile::default().overlap(|_| true).exposed_us, 0.0);
    }

    #[test]
    fn a_malformed_line_is_named() {
        let error = DeviceProfile::parse("kernel\t1\tx\t7\tk\n").unwrap_err().to_string();
        assert!(error.contains("duration `x`"), "{error}");
        let error = DeviceProfile::parse("launch\t1\t2\t7\tk\n").unwrap_err().to_string();
        assert!(error.contains("unknown kind `launch`"), "{error}");
        // Names may hold anything but a tab or a line break (the shim replaces those).
        let profile = DeviceProfile::parse(&line("kernel", 5, 1, 0, "void f<int, 2>(float*)")).unwrap();
        assert_eq!(profile.activities[0].name, "void f<int, 2>(float*)");
        assert_eq!(profile.activities[0].launch, None);
    }

    const H200: SmLimits = SmLimits { multiprocessors: 132, max_threads: 2048, max_blocks: 32, registers: 65536, shared_memory: 233_472 };

    #[test]
    fn a_kernels_launch_is_read_from_its_metadata_and_sets_its_share() {
        let meta = r#""queued": 0, "device": 0, "stream": 7, "registers per thread": 32, "shared memory": 0, "blocks per SM": 0.5, "grid": [66, 1, 1], "block": [256, 1, 1], "est. achieved occupancy %": 6"#;
        let text = format!("kernel\t10\t5\t7\tk\t{meta}\nmemset\t20\t1\t7\tMemset\t\"device\": 0\n");
        let profile = DeviceProfile::parse(&text).unwrap();
        let launch = profile.activities[0].launch.expect("a kernel with metadata");
        assert_eq!((launch.grid, launch.block, launch.registers_per_thread, launch.shared_memory), ([66, 1, 1], [256, 1, 1], 32, 0));
        assert_eq!(profile.activities[1].launch, None);
        // 8 blocks of 256 threads per SM: 66 of 1056 slots.
        assert!((launch.sm_share(&H200) - 66.0 / 1056.0).abs() < 1e-12);
        // Registers limit it to 2 blocks per SM (128 × 256 × 2 = 65536).
        let heavy = KernelLaunch { registers_per_thread: 128, ..launch };
        assert!((heavy.sm_share(&H200) - 66.0 / 264.0).abs() < 1e-12);
        // Shared memory to 1 block per SM; a grid of more than one wave fills the GPU.
        let big = KernelLaunch { shared_memory: 200_000, grid: [64, 4, 1], ..launch };
        assert_eq!(big.sm_share(&H200), 1.0);
        assert!(KernelLaunch::from_metadata("not json").is_none() && KernelLaunch::from_metadata("").is_none());
    }
}
