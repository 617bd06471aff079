"""Inference with nimble_rs: a branchy network run as one multi-stream CUDA graph, two ways.

    python3 nimble-py/examples/inference.py

- ``nimble_rs.Nimble(model)``: the libtorch engine (TorchScript trace, Nimble's rewrites and
  streams, one captured graph); needs CUDA and torch 2.11.0.
- ``torch.compile(model, backend="nimble")``: Inductor's fused kernels on Nimble's streams; on a
  machine without CUDA it still runs, its regions in plan order.

Without CUDA the example does what the CPU allows: the backend, and the scheduler on the model's
task graph (streams, syncs, simulated latency).
"""

import torch
from torch import nn

import nimble_rs


class Inception(nn.Module):
    """Three branches of different depth from one input, concatenated."""

    def __init__(self, c=16):
        super().__init__()
        self.a = nn.Conv2d(c, c, 1)
        self.b = nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1))
        self.c = nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU(), nn.Conv2d(c, c, 5, padding=2))
        self.mix = nn.Conv2d(3 * c, c, 1)

    def forward(self, x):
        return self.mix(torch.cat([self.a(x), self.b(x), self.c(x)], 1)).relu()


def main(device: str = "cuda" if torch.cuda.is_available() else "cpu") -> dict:
    model = Inception().to(device).eval()
    x = torch.randn(1, 16, 32, 32, device=device)
    with torch.no_grad():
        expected = model(x)
        fast = torch.compile(model, backend="nimble")
        error = (fast(x) - expected).abs().max().item()
    report = nimble_rs.dynamo.reports()[-1]
    print(f"backend: {report['streams']} streams, {report['regions']} regions, chose {report['choice']}; max |difference| {error:.1e}")
    if device == "cuda":
        nimble = nimble_rs.Nimble(model)
        prepared = nimble.prepare(x)
        with torch.no_grad():
            print(f"Nimble: {prepared['streams']} streams, {prepared['syncs']} syncs; max |difference| {(nimble(x) - expected).abs().max().item():.1e}")
    else:
        # The scheduler on the backend's own task graph of the model.
        from torch.fx.experimental.proxy_tensor import make_fx

        from nimble_rs.dynamo.program.taskgraph import tasks_of

        graph = tasks_of(make_fx(model)(x)).graph
        for node in graph["nodes"]:
            node["duration_us"] = 10.0 if node["op"] == "aten::convolution" else 2.0
        simulated = nimble_rs.simulate(graph, "nimble", "graph")
        print(f"no CUDA: nimble plans {simulated['streams']} streams for {len(graph['nodes'])} ops, simulated {simulated['makespan_us']:.1f} µs against {simulated['single_makespan_us']:.1f} on one stream")
    return report


if __name__ == "__main__":
    main()
