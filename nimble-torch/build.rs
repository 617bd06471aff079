//! Compiles the C++ shim (`shim/*.cpp`, its C ABI in `shim/nimble_shim.h`) and the fused CUDA
//! kernels against the libtorch that torch-sys links, and tells the linker where libtorch and the
//! CUDA runtime live.
//!
//! torch-sys declares `links = "tch"`, so its libtorch lib dir reaches us as
//! `DEP_TCH_LIBTORCH_LIB`. We pass the two library dirs on to crates that link the final
//! binaries as `DEP_NIMBLESHIM_RPATH` (see `nimble_torch::link_args` in their build scripts):
//! link arguments only apply to the package that emits them.

use std::path::PathBuf;

/// The shim's C++ files, one per concern (see `shim/nimble_shim.h`).
const SHIM_SOURCES: [&str; 12] = [
    "common.cpp",
    "device.cpp",
    "record.cpp",
    "passes.cpp",
    "jit.cpp",
    "freeze.cpp",
    "host_values.cpp",
    "training.cpp",
    "fused_ops.cpp",
    "linear_ops.cpp",
    "timed_choice.cpp",
    "comm.cpp",
];

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
    // NCCL (data parallelism) comes with the pip packages too; libtorch_cuda itself links it.
    let nccl = torch.join("../nvidia/nccl");
    let kernels = compile_kernels(&cuda);
    cc::Build::new()
        .cpp(true)
        .pic(true)
        .warnings(false)
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include(cuda.join("include"))
        .include(nccl.join("include"))
        .flag("-std=c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        // libtorch is a release build; some of its headers (RecordFunction) change layout without it.
        .define("NDEBUG", None)
        // Without debug information whatever the profile: with it, compiling the shim against
        // libtorch's headers took 90-160 s of a development build on two cores, without it about
        // 60 (a shim of thin wrappers; the Rust side keeps its own).
        .debug(false)
        .files(SHIM_SOURCES.iter().map(|file| format!("shim/{file}")))
        .object(&kernels)
        .compile("nimble_shim");
    println!("cargo:rerun-if-changed=shim");
    let cuda_lib = cuda.join("lib");
    let nccl_lib = nccl.join("lib");
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-search=native={}", cuda_lib.display());
    println!("cargo:rustc-link-search=native={}", nccl_lib.display());
    // libtorch_cuda must be loaded (it registers CUDA with libtorch) or CUDA looks unavailable;
    // the shim references it by name, so the linker's --as-needed keeps it.
    println!("cargo:rustc-link-lib=dylib=torch_cuda");
    println!("cargo:rustc-link-lib=dylib=c10_cuda");
    // Header-inline code calls the CUDA runtime directly; the pip package ships only the .so.13.
    println!("cargo:rustc-link-lib=dylib:+verbatim=libcudart.so.13");
    println!("cargo:rustc-link-lib=dylib:+verbatim=libnccl.so.2");
    // The rpath covers our own tests; dependents add it through their build scripts.
    for dir in [&lib, &cuda_lib, &nccl_lib] {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
    println!("cargo:rpath={}:{}:{}", lib.display(), cuda_lib.display(), nccl_lib.display());
}

/// Compiles the fused CUDA kernels (`shim/nimble_kernels.cu`) with the pip packages' nvcc into an
/// object file for Ampere (sm_80) and Hopper (sm_90), with sm_90 PTX for newer GPUs to JIT.
fn compile_kernels(cuda: &std::path::Path) -> PathBuf {
    let nvcc = cuda.join("bin/nvcc");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("nimble_kernels.o");
    let mut command = std::process::Command::new(&nvcc);
    command.args(["-c", "-O3", "-std=c++17", "-Xcompiler", "-fPIC"]);
    for gencode in ["arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90", "arch=compute_90,code=compute_90"] {
        command.arg("-gencode").arg(gencode);
    }
    command.args(["-I", "shim", "shim/nimble_kernels.cu", "-o"]).arg(&out);
    let status = command.status().unwrap_or_else(|e| {
        panic!("nimble-torch: cannot run {} ({e}); provision libtorch with scripts/setup-libtorch.sh", nvcc.display())
    });
    if !status.success() {
        panic!(
            "nimble-torch: {} failed on shim/nimble_kernels.cu ({status}); if it names an unsupported PTX version, \
             run scripts/setup-libtorch.sh again (it pins nvcc's compiler to CUDA 13.0)",
            nvcc.display()
        );
    }
    out
}
