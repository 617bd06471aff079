"""What the backend's rewrites of AOTAutograd's graph before Inductor compiles it share
(``merge``, ``fold``, ``products``, ``depthwise``): a node's fake value, new nodes each given theirs (Inductor
lowers by them), and a rewrite that fails leaving the graph to Inductor, said once."""

from typing import Any, Callable, Dict, List, Optional

import torch
import torch.fx

from ..common.announce import warn_once


def value(node) -> Optional[torch.Tensor]:
    """The fake tensor a node computes, if it computes one."""
    found = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return found if isinstance(found, torch.Tensor) else None


def cuda_device(tensor: torch.Tensor) -> torch.device:
    """The CUDA device of a (fake) tensor, its index filled in (the current device's where the
    tensor names none), for the real tensors a measurement at compile time makes."""
    index = tensor.device.index
    return torch.device(tensor.device.type, index if index is not None else torch.cuda.current_device())


class Builder:
    """New nodes before ``anchor``, each given its fake value under ``fake_mode``."""

    def __init__(self, graph: torch.fx.Graph, anchor: torch.fx.Node, fake_mode):
        self.graph, self.anchor, self.fake_mode = graph, anchor, fake_mode
        self.created: List[torch.fx.Node] = []

    def add(self, target, *args, **kwargs) -> torch.fx.Node:
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(target, args, kwargs)
        with self.fake_mode:
            node.meta["val"] = target(*torch.fx.node.map_arg(args, value), **kwargs)
        self.created.append(node)
        return node

    def undo(self) -> None:
        """Every node made, erased (none of them may have a user left)."""
        for node in reversed(self.created):
            self.graph.erase_node(node)
        self.created.clear()


def substitute(graph: torch.fx.Graph, node: torch.fx.Node, replacement: torch.fx.Node) -> None:
    """``node``'s users made ``replacement``'s, and ``node`` erased."""
    node.replace_all_uses_with(replacement)
    graph.erase_node(node)


def recompile_if(gm: torch.fx.GraphModule, changed: int) -> None:
    """``gm`` checked and its code made again where a rewrite ``changed`` anything."""
    if changed:
        gm.graph.lint()
        gm.recompile()


def guarded(gm: torch.fx.GraphModule, option: str, what: str, rewrite: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """``rewrite()`` (a pass of option ``option`` over ``gm``, its counts); where it raises, the
    nodes it left unused removed, the failure announced once and returned as ``{"failed": ...}``:
    ``what`` it had not reached are compiled by Inductor as they are."""
    try:
        return rewrite()
    except Exception as error:  # noqa: BLE001 - Inductor compiles whatever the graph is now
        gm.graph.eliminate_dead_code()
        gm.recompile()
        warn_once((option, type(error).__name__), f"nimble backend: option {option} stopped ({type(error).__name__}: {error}); the {what} it had not reached run as Inductor compiles them")
        return {"failed": f"{type(error).__name__}: {error}"}
