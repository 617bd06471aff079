"""Whether cuDNN's benchmark search picks one algorithm for a depthwise convolution from one
process to the next, and whether the call's form changes it: NASNet-A large's 3x3 depthwise
convolutions (bfloat16, batch 1, channels-last) timed in fresh processes, each once as the
graph calls them (padding 1 passed to the convolution) and once on an input padded beforehand
(padding 0: another key in cuDNN's benchmark cache, searched apart), as option
``depthwise_kernels`` timed its baseline before `c77a5b8`. At `fb141f8` (H200) that baseline
measured 2.5-3.3 us in one process and 7-16 us in another. Each count of --busy (by default
0, then 15) is a run of its own with that many processes spinning on the CPU meanwhile, as the
kernel's compile workers do while the baselines are timed. Each
call's first run is its search; it is then timed as the backend times it
(``timing.graph_us``: repeats in a CUDA graph, behind a wait of the GPU).

    python3 experiments/python/probes/cudnn_key_probe.py [--processes 4] [--busy 0,15] [--dtype bfloat16]

(with nimble_rs installed: its ``timing.graph_us`` times the calls).
"""

import argparse
import json
import multiprocessing
import subprocess
import sys

# NASNet-A large's 3x3 depthwise convolutions at batch 1 (the input of each)
SHAPES = [(1, 42, 83, 83), (1, 84, 42, 42), (1, 168, 42, 42), (1, 336, 21, 21), (1, 672, 11, 11)]

CHILD = """
import json, sys
import torch, torch.nn.functional as F
from nimble_rs.dynamo.common.timing import graph_us
torch.backends.cudnn.benchmark = True
dtype = getattr(torch, sys.argv[1])
found = []
for shape in json.loads(sys.argv[2]):
    x = torch.randn(shape, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
    w = torch.randn(shape[1], 1, 3, 3, device="cuda", dtype=dtype)
    padded = F.pad(x, (1, 1, 1, 1)).contiguous(memory_format=torch.channels_last)
    inside = graph_us(lambda: F.conv2d(x, w, None, 1, 1, 1, shape[1]))
    before = graph_us(lambda: F.conv2d(padded, w, None, 1, 0, 1, shape[1]))
    found.append([round(inside, 2), round(before, 2)])
print(json.dumps(found))
"""


def spin():
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=4, help="fresh processes, each searching every call once")
    parser.add_argument("--busy", default="0,15", help="runs, each with this many processes spinning on the CPU meanwhile (comma-separated)")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args()
    try:
        busy = [int(n) for n in args.busy.split(",")]
    except ValueError:
        raise SystemExit(f"error: --busy {args.busy!r}: expected comma-separated counts of processes")
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("error: no CUDA device: the probe times cuDNN's convolutions on a GPU")
    for count in busy:
        spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(count)]
        for spinner in spinners:
            spinner.start()
        try:
            runs = []
            for _ in range(args.processes):
                done = subprocess.run([sys.executable, "-c", CHILD, args.dtype, json.dumps(SHAPES)], capture_output=True, text=True, timeout=300)
                if done.returncode != 0:
                    raise SystemExit(f"error: a probe process failed: {done.stderr[-2000:]}")
                runs.append(json.loads(done.stdout.splitlines()[-1]))
        finally:
            for spinner in spinners:
                spinner.terminate()
        print(f"# {args.dtype}, {count} processes spinning; us per call, padding passed / padded beforehand, one column per process")
        for i, shape in enumerate(SHAPES):
            print(f"{str(list(shape)):18} " + "  ".join(f"{run[i][0]:6.2f}/{run[i][1]:6.2f}" for run in runs), flush=True)


if __name__ == "__main__":
    main()
