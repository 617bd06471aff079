"""Sibling convolutions merged into one (option ``merge_convolutions``): convolutions that read
the same input with the same kernel size, stride, padding and dilation become one convolution
over their weights concatenated, each original output a channel slice of it. The merge stage of
inter-operator schedulers (IOS, Ding et al., MLSys 2021): where branches each fill the GPU (batch
16 on Inception's blocks), running them side by side on streams buys little, while one
convolution reads its input once and launches one kernel of more output channels.

The weights are concatenated in the graph, on every call: parameters are still read in place,
so a weight changed after compiling is the weight used. Inference graphs only: a training
forward's outputs (what the backward saves) keep the strides AOTAutograd planned for them.
"""

from collections import defaultdict
from typing import Dict, List, Optional, Tuple

import torch
import torch.fx

from .fxnodes import Builder
from .fxnodes import value as _val

aten = torch.ops.aten


def _key(node: torch.fx.Node) -> Optional[Tuple]:
    """What convolutions must share to be merged (None: this one is never merged): the input,
    the weight's shape past its output channels and its dtype, bias or none, and every
    argument but the weight and bias. Only plain convolutions (not transposed, one group)."""
    if node.op != "call_function" or node.target is not aten.convolution.default or len(node.args) != 9:
        return None
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = node.args
    w = _val(weight)
    if transposed or groups != 1 or w is None or not isinstance(x, torch.fx.Node) or _val(node) is None:
        return None
    if bias is not None and _val(bias) is None:
        return None
    if any(user.op == "output" for user in node.users):
        return None  # a graph output keeps the strides its caller was promised
    if not all(isinstance(v, int) for v in (*stride, *padding, *dilation, *output_padding, *w.shape)):
        return None  # symbolic sizes (dynamic shapes): left as they are
    return (x, tuple(w.shape[1:]), w.dtype, w.device, bias is None, tuple(stride), tuple(padding), tuple(dilation), tuple(output_padding))


def merge_sibling_convolutions(gm: torch.fx.GraphModule) -> List[int]:
    """Merges ``gm``'s sibling convolutions in place; the number merged in each group merged
    (empty: nothing changed)."""
    graph = gm.graph
    order = {node: i for i, node in enumerate(graph.nodes)}
    groups: Dict[Tuple, List[torch.fx.Node]] = defaultdict(list)
    for node in graph.nodes:
        key = _key(node)
        if key is not None:
            groups[key].append(node)
    merged = []
    for convolutions in groups.values():
        if len(convolutions) < 2:
            continue
        first = convolutions[0]
        # Every weight and bias must exist before the first of them runs.
        operands = [a for c in convolutions for a in c.args[1:3] if isinstance(a, torch.fx.Node)]
        if any(order[a] > order[first] for a in operands):
            continue
        if _merge(graph, convolutions):
            merged.append(len(convolutions))
    if merged:
        graph.lint()
        gm.recompile()
    return merged


def _merge(graph: torch.fx.Graph, convolutions: List[torch.fx.Node]) -> bool:
    """One convolution in place of ``convolutions`` (False, unchanged, without fake values to
    give the new nodes: Inductor lowers by them)."""
    from torch._guards import detect_fake_mode

    first = convolutions[0]
    x, _, bias, *rest = first.args
    fake_mode = detect_fake_mode([_val(c.args[1]) for c in convolutions] + [_val(x)])
    if fake_mode is None:
        return False

    add = Builder(graph, first, fake_mode).add
    weight = add(aten.cat.default, [c.args[1] for c in convolutions], 0)
    merged_bias = add(aten.cat.default, [c.args[2] for c in convolutions], 0) if bias is not None else None
    output = add(aten.convolution.default, x, weight, merged_bias, *rest)
    start = 0
    for c in convolutions:
        end = start + _val(c.args[1]).shape[0]
        piece = add(aten.slice.Tensor, output, 1, start, end)
        c.replace_all_uses_with(piece)
        start = end
    for c in convolutions:
        graph.erase_node(c)
    return True
