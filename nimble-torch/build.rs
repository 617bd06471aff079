//! Compiles the C++ shim (`shim/nimble_shim.cpp`) against the libtorch that torch-sys links, and
//! tells the linker where libtorch and the CUDA runtime live.
//!
//! torch-sys declares `links = "tch"`, so its libtorch lib dir reaches us as
//! `DEP_TCH_LIBTORCH_LIB`. We pass the two library dirs on to crates that link the final
//! binaries as `DEP_NIMBLESHIM_RPATH` (see `nimble_torch::link_args` in their build scripts):
//! link arguments only apply to the package that emits them.

use std::path::PathBuf;

fn main() {
    let lib = PathBuf::from(std::env::var("DEP_TCH_LIBTORCH_LIB").expect("torch-sys exports DEP_TCH_LIBTORCH_LIB"));
    let torch = lib.parent().expect("libtorch's lib dir has a parent").to_path_buf();
    let include = torch.join("include");
    // The CUDA headers and runtime that come with the pip packages (scripts/setup-libtorch.sh).
    let cuda = torch.join("../nvidia/cu13");
    if !cuda.join("include/cuda_runtime_api.h").exists() {
        panic!(
            "nimble-torch: CUDA headers not found at {}; provision libtorch with scripts/setup-libtorch.sh \
             (it installs torch==2.11.0 with cuda-toolkit[cccl,nvcc]==13.0.2)",
            cuda.join("include").display()
        );
    }
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include(cuda.join("include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        // libtorch is a release build; some of its headers (RecordFunction) change layout without it.
        .define("NDEBUG", None)
        .file("shim/nimble_shim.cpp")
        .compile("nimble_shim");
    println!("cargo:rerun-if-changed=shim/nimble_shim.cpp");
    let cuda_lib = cuda.join("lib");
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-search=native={}", cuda_lib.display());
    // libtorch_cuda must be loaded (it registers CUDA with libtorch) or CUDA looks unavailable;
    // the shim references it by name, so the linker's --as-needed keeps it.
    println!("cargo:rustc-link-lib=dylib=torch_cuda");
    println!("cargo:rustc-link-lib=dylib=c10_cuda");
    // Header-inline code calls the CUDA runtime directly; the pip package ships only the .so.13.
    println!("cargo:rustc-link-lib=dylib:+verbatim=libcudart.so.13");
    // The rpath covers our own tests; dependents add it through their build scripts.
    for dir in [&lib, &cuda_lib] {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
    println!("cargo:rpath={}:{}", lib.display(), cuda_lib.display());
}
