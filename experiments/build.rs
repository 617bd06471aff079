//! Bakes the git commit into the crate, so result records written on a GPU machine (which has
//! the working tree but no repository) still say which code produced them; and links this
//! crate's binaries (tests) against libtorch the way nimble-torch says.

use std::process::Command;

fn main() {
    link_libtorch();
    let git = |arguments: &[&str]| {
        Command::new("git").args(arguments).output().ok().filter(|o| o.status.success()).map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    println!("cargo:rustc-env=NIMBLE_COMMIT={commit}{}", if dirty { "-dirty" } else { "" });
    if let Some(git_dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={git_dir}/HEAD");
        println!("cargo:rerun-if-changed={git_dir}/index");
        if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={git_dir}/{reference}");
        }
    }
}

/// nimble-torch passes its libtorch and CUDA runtime dirs as `DEP_NIMBLESHIM_RPATH`; as an rpath
/// they let this crate's test binaries run without LD_LIBRARY_PATH.
fn link_libtorch() {
    if let Ok(dirs) = std::env::var("DEP_NIMBLESHIM_RPATH") {
        for dir in dirs.split(':') {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
