"""One fp8 row quantization per input in a compiled block: an Inductor post-grad pass.

LTX-2's attention projects one input several times (self-attention: to_q, to_k and to_v of `x`;
the cross-attentions: to_k and to_v of one context), and each fp8-scaled-mm linear quantizes its
input (`ltx_tui::fp8_rows`, `runtime.quant`). Inductor does not deduplicate custom ops in an
inference graph (AOTAutograd's CSE runs for training graphs only), so a compiled block would read a
6144 x 4096 activation three times to write the same fp8 rows three times. `SharedRows` keeps the
first `fp8_rows` of each (input, gelu) and points the others' users at it; an input seen through
`aten.view` / `aten.reshape` of one tensor to one shape is the same input. `install()` sets it as
Inductor's `post_grad_custom_post_pass` (process-wide; it touches no other op), unless another pass
is there.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

_VIEWS = ("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")


def _source(node: Any) -> Any:
    """What a node reads: (the viewed node, the shape) through a view, else the node itself."""
    if (isinstance(node, torch.fx.Node) and node.op == "call_function" and str(node.target) in _VIEWS
            and len(node.args) == 2 and not node.kwargs):
        return node.args[0], tuple(node.args[1])
    return node


ENABLED = True  # bench/ltx2_dit.py's `:unshared` ablation turns it off


class SharedRows(CustomGraphPass):
    """Drop an `ltx_tui::fp8_rows` whose input and `gelu` an earlier one in the graph had."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        op = torch.ops.ltx_tui.fp8_rows.default
        first: dict[tuple, torch.fx.Node] = {}
        for node in list(graph.nodes):
            if node.op != "call_function" or node.target is not op:
                continue
            key = (_source(node.args[0]), *node.args[1:], tuple(sorted(node.kwargs.items())))
            kept = first.setdefault(key, node)
            if kept is not node:
                view = node.args[0]
                node.replace_all_uses_with(kept)
                graph.erase_node(node)
                if _source(view) is not view and not view.users:  # the view only it read
                    graph.erase_node(view)

    def uuid(self) -> Any:
        return get_hash_for_files((__file__,))


def install() -> bool:
    """Make `SharedRows` Inductor's post-grad custom pass (True: it is, now or already; False: another
    pass is there, or `ENABLED` is off)."""
    import backends.runtime.quant  # noqa: F401  (defines ltx_tui::fp8_rows)

    if not ENABLED:
        return False
    current = config.post_grad_custom_post_pass
    if isinstance(current, SharedRows):
        return True
    if current is not None:
        return False
    config.post_grad_custom_post_pass = SharedRows()
    return True
