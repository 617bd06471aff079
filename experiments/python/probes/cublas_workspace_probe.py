"""How much memory each CUDA stream's cuBLAS workspace takes: a matrix product on one stream,
then on 1..7 more streams, eagerly and inside one CUDA graph capture (as the backend captures its
plan's streams), with torch.cuda.memory_allocated after each. A probe of why the backend's peak
memory on the decoders (7 streams, matrix products on each) is about 150 MiB above
reduce-overhead's (one stream).

    python3 experiments/python/probes/cublas_workspace_probe.py
"""

import os

import torch


def mib(x):
    return f"{x / 2**20:.1f} MiB"


def main():
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, CUBLAS_WORKSPACE_CONFIG={os.environ.get('CUBLAS_WORKSPACE_CONFIG')!r}, CUBLASLT_WORKSPACE_SIZE={os.environ.get('CUBLASLT_WORKSPACE_SIZE')!r}")
    a = torch.randn(128, 1024, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    torch.mm(a, b)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    print(f"eager, after the first stream's product: {mib(base)} allocated")
    for k in range(1, 8):
        with torch.cuda.stream(torch.cuda.Stream()):
            torch.mm(a, b)
        torch.cuda.synchronize()
        print(f"eager, {k} more streams: +{mib(torch.cuda.memory_allocated() - base)}")
    # Inside one capture: the capture stream forks to 7 new streams, a product on each, joined.
    before = torch.cuda.memory_allocated()
    graph = torch.cuda.CUDAGraph()
    side = [torch.cuda.Stream() for _ in range(7)]
    capture = torch.cuda.Stream()
    capture.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(capture):
        graph.capture_begin()
        outputs = []
        for s in side:
            s.wait_stream(capture)
            with torch.cuda.stream(s):
                outputs.append(torch.mm(a, b))
            capture.wait_stream(s)
        graph.capture_end()
    torch.cuda.synchronize()
    print(f"one capture over 7 new streams: +{mib(torch.cuda.memory_allocated() - before)} (outputs {mib(sum(o.numel() * o.element_size() for o in outputs))})")
    graph.replay()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
