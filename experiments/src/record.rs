//! Provenance: what every committed result record says about where and when it was measured.

use nimble_cuda::DeviceInfo;
use serde::{Deserialize, Serialize};

/// Where, when, with what code and how a result was measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Provenance {
    pub gpu: String,
    pub compute_capability: String,
    pub multiprocessors: i32,
    /// The driver's CUDA version.
    pub driver_cuda_version: String,
    /// The kernel driver's version (e.g. 580.159.04), when the machine reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver_version: Option<String>,
    /// UTC time the measurement finished, RFC 3339.
    pub date_utc: String,
    /// Git commit of the code that measured (with `-dirty` if it had uncommitted changes).
    pub commit: String,
    pub warmup: usize,
    pub iterations: usize,
    /// How each sample was taken.
    pub method: String,
}

impl Provenance {
    /// Provenance for a measurement on `device`, stamped now.
    pub fn now(device: &DeviceInfo, warmup: usize, iterations: usize, method: &str) -> Provenance {
        Provenance {
            gpu: device.name.clone(),
            compute_capability: format!("{}.{}", device.compute_capability.0, device.compute_capability.1),
            multiprocessors: device.multiprocessors,
            driver_cuda_version: device.driver_cuda_version.clone(),
            driver_version: kernel_driver_version(),
            date_utc: now_utc(),
            commit: build_commit().to_string(),
            warmup,
            iterations,
            method: method.to_string(),
        }
    }
}

/// The commit this binary was built from (`-dirty` when the tree had changes).
pub fn build_commit() -> &'static str {
    env!("NIMBLE_COMMIT")
}

/// Now, UTC, as the records write dates (RFC 3339, seconds).
pub fn now_utc() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

/// The NVIDIA kernel module's version, from `/proc/driver/nvidia/version` (Linux).
fn kernel_driver_version() -> Option<String> {
    parse_driver_version(&std::fs::read_to_string("/proc/driver/nvidia/version").ok()?)
}

/// The first dotted number after "Kernel Module" on the first line, e.g. `580.159.04` from
/// "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build".
fn parse_driver_version(text: &str) -> Option<String> {
    let after = text.lines().next()?.split("Kernel Module").nth(1)?;
    after
        .split_whitespace()
        .find(|word| word.contains('.') && word.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::parse_driver_version;

    #[test]
    fn driver_version_from_proc_lines() {
        let cases = [
            ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)  ", Some("580.159.04")),
            ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023", Some("535.104.05")),
            ("something else", None),
        ];
        for (line, expected) in cases {
            assert_eq!(parse_driver_version(line).as_deref(), expected, "{line}");
        }
    }
}
