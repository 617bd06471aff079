"""What the backend's rewrites of AOTAutograd's graph before Inductor compiles it share
(``merge``, ``fold``, ``products``): a node's fake value, and new nodes each given theirs (Inductor lowers by
them)."""

from typing import List, Optional

import torch
import torch.fx


def value(node) -> Optional[torch.Tensor]:
    """The fake tensor a node computes, if it computes one."""
    found = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return found if isinstance(found, torch.Tensor) else None


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
