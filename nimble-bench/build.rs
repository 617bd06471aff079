//! Links the CLI against libtorch the way nimble-torch says: nimble-torch passes its libtorch
//! and CUDA runtime dirs as `DEP_NIMBLESHIM_RPATH`; as an rpath they let the binary run without
//! LD_LIBRARY_PATH where libtorch was provisioned (LD_LIBRARY_PATH still wins, as on the GPU
//! machines). Link arguments apply only to the package that emits them, hence this script.

fn main() {
    if let Ok(dirs) = std::env::var("DEP_NIMBLESHIM_RPATH") {
        for dir in dirs.split(':') {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
