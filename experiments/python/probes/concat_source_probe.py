"""How Inductor's program writes a join that option ``concat_in_place`` lowers in place, on a
GPU: the lines of Inductor's ``call`` that allocate the join, view it and run the kernels
writing it, and what ``nimble_rs.dynamo.program.wrapper.WrapperProgram`` reads from each (the storages
read and written, the statements each must follow). A probe for planning the parts of a join
as independent writes of disjoint slices: whether each part's kernel is handed a view of its
slice (``reinterpret_tensor(join, sizes, strides, offset)``) or the whole join with its offset
inside the kernel. On the CPU, Inductor's C++ backend writes every part in one kernel.

    python3 experiments/python/probes/concat_source_probe.py [--batch 16] [--size 35] [--device cpu]

(with nimble_rs installed; on the CPU Inductor is told to lower the join pointwise, as on a GPU,
so that the option's hook is reached).
"""

import argparse
import inspect

import torch
from torch import nn


class Block(nn.Module):
    """An Inception-style block: four branches of convolution, BatchNorm and ReLU joined along
    the channels, the join read by a convolution."""

    def __init__(self, channels=(64, 96, 96, 32)):
        super().__init__()
        self.branches = nn.ModuleList([nn.Sequential(nn.Conv2d(64, c, 1), nn.BatchNorm2d(c), nn.ReLU()) for c in channels])
        self.out = nn.Conv2d(sum(channels), 64, 1)

    def forward(self, x):
        return self.out(torch.cat([b(x) for b in self.branches], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=35)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    from nimble_rs.dynamo.passes import concat

    from nimble_rs.dynamo.program import kernels_plan
    from nimble_rs.dynamo.program.wrapper import WrapperProgram

    model = Block().to(args.device).eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
    x = torch.randn(args.batch, 64, args.size, args.size, device=args.device)
    programs = []

    def inner(gm, example_inputs, **kwargs):
        counts = {}
        with concat.in_place(counts):
            compiled = compile_fx_inner(gm, example_inputs, **kwargs)
        programs.append((kernels_plan.inductor_module(compiled), counts))
        return compiled

    torch._dynamo.reset()
    with torch._functorch.config.patch(enable_autograd_cache=False), torch._inductor.config.patch(fx_graph_cache=False, force_pointwise_cat=args.device == "cpu"), torch.no_grad():
        got = torch.compile(model, backend=lambda gm, inputs: compile_fx(gm, inputs, inner_compile=inner))(x)
        error = float((got - model(x)).abs().max() / model(x).abs().max())
    module, counts = programs[0]
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device
    print(f"torch {torch.__version__}, {where}; batch {args.batch}, {args.size}x{args.size}; concat_in_place {counts}; relative error against eager {error:.2e}")
    source = inspect.getsource(module)
    body = source[source.index("def call("):]
    print("== Inductor's call (allocations, views, kernels; checks and dels left out)")
    for line in body.splitlines()[: 400]:
        text = line.strip()
        if text.startswith(("assert_size_stride", "del ", "#")) or not text:
            continue
        print("   ", text[:220])
        if text.startswith("return"):
            break
    program = WrapperProgram(module)
    print("== WrapperProgram: kernel statements, storages read / written, statements followed")
    for s in program.statements:
        if s.kind in ("kernel", "alloc", "alias"):
            print(f"   {s.index:3d} {s.kind:6s} {s.name or ','.join(s.defines):60.60s} reads {sorted(s.reads)} writes {sorted(s.writes)} needs {sorted(program.needs[s.index])}")


if __name__ == "__main__":
    main()
