"""One fp8 row quantization per input in a compiled block, and none of rows already fp8: an Inductor
post-grad pass.

LTX-2's attention projects one input several times (self-attention: to_q, to_k and to_v of `x`;
the cross-attentions: to_k and to_v of one context), and each fp8-scaled-mm linear quantizes its
input (`ltx_tui::fp8_rows`, `runtime.quant`). Inductor does not deduplicate custom ops in an
inference graph (AOTAutograd's CSE runs for training graphs only), so a compiled block would read a
6144 x 4096 activation three times to write the same fp8 rows three times. `SharedRows` keeps the
first `fp8_rows` of each (input, gelu) and points the others' users at it; an input seen through
`aten.view` / `aten.reshape` of one tensor to one shape is the same input.

Before that it folds an `fp8_rows` of fp8 rows just dequantized (`ltx_tui::fp8_dequant_rows`, seen
through views to the same 2-D shape): its users get the rows and their scales as they are. That is
cuDNN's fp8 attention output going into `to_out` (`runtime.dense_attention`): no dequantization
pass and no new row quantization, one rounding of O instead of two. Anything between the two (LTX-2's
perturbation blend, a gate) leaves them as they are. Last, a norm of `transformer.fast_norm`
(`ltx_tui::ada_zero`, `ltx_tui::post_sa`'s normed output) whose only use is one `fp8_rows` becomes
the norm that writes those rows itself (`ltx_tui::ada_zero_rows`, `ltx_tui::post_sa_rows`): one pass
that reads x once and writes e4m3 rows, where the two wrote and read the bf16 rows between them.
Then a residual add whose sum goes into one or two such AdaLN norms (LTX-2's `vx = vx + attn2(...)`
before the a2v and v2a norms of vx, `vx = vx + a2v(...) * gate * mask` before the feed-forward's)
joins them (`ltx_tui::add_ada_zero_rows`): the sum is written once and read by no other pass.
An AdaLN norm whose rows go by one scale to a FusedFeedForward or a `v_e4m3.VProjection` (and, for
the latter, row-scaled to to_q and to_k) writes them by a scale bounded from its modulation; then a
VProjection's v that only cuDNN's fp8 attention reads comes out of its GEMM in e4m3 (`_fold_v`).
`install()` sets the pass as Inductor's `post_grad_custom_post_pass` (process-wide; it touches no
other op), unless another pass is there.
"""

from __future__ import annotations

import math
import operator
from contextlib import nullcontext
from typing import Any

import torch
from torch._guards import detect_fake_mode
from torch._inductor import config
from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

_VIEWS = ("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default")


def _is_view(node: Any) -> bool:
    return (isinstance(node, torch.fx.Node) and node.op == "call_function" and str(node.target) in _VIEWS
            and len(node.args) == 2 and not node.kwargs)


def _source(node: Any) -> Any:
    """What a node reads: (the viewed node, the shape) through a view, else the node itself."""
    if _is_view(node):
        return node.args[0], tuple(node.args[1])
    return node


def _shape(node: Any) -> tuple | None:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return tuple(val.shape) if isinstance(val, torch.Tensor) else None


def _erase_dead(graph: torch.fx.Graph, node: Any) -> None:
    """Erase `node` and the views it read, for as long as nothing else uses them."""
    while isinstance(node, torch.fx.Node) and not node.users and node.op == "call_function":
        read = node.args[0] if node.args else None
        graph.erase_node(node)
        node = read


def _only_use(node: Any, user: Any) -> bool:
    """Whether `user` is the one use of `node`, directly or through a chain of single-use views."""
    while isinstance(node, torch.fx.Node) and len(node.users) == 1:
        (used_by,) = node.users
        if used_by is user:
            return True
        if not _is_view(used_by):
            return False
        node = used_by
    return False


def _erase_gates(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Erase `node` and the products it read, for as long as nothing else uses them."""
    if node.users:
        return
    read = [a for a in node.args if _op(a, "aten.mul.Tensor")]
    graph.erase_node(node)
    for a in read:
        _erase_gates(graph, a)


def _insert(graph: torch.fx.Graph, before: torch.fx.Node, op: Any, args: tuple, kwargs: dict | None = None) -> Any:
    """`op(*args, **kwargs)` inserted before node `before`, with the fake value Inductor reads
    (`meta["val"]`); for an op of several outputs, a getitem node for each of them (a list)."""
    kwargs = kwargs or {}

    def val(a):
        return a.meta["val"] if isinstance(a, torch.fx.Node) else a

    fake = [val(a) for a in args], {k: val(a) for k, a in kwargs.items()}
    tensors = [v for v in (*fake[0], *fake[1].values()) if isinstance(v, torch.Tensor)]
    with detect_fake_mode(tensors) or nullcontext():
        out = op(*fake[0], **fake[1])
    with graph.inserting_before(before):
        node = graph.call_function(op, tuple(args), dict(kwargs))
        node.meta["val"] = out
        if isinstance(out, torch.Tensor):
            return node
        items = [graph.call_function(operator.getitem, (node, i)) for i in range(len(out))]
    for item, v in zip(items, out):
        item.meta["val"] = v
    return items


def _call(graph: torch.fx.Graph, op: Any, like: torch.fx.Node) -> list[torch.fx.Node]:
    """`op` called with the arguments of node `like`, inserted before it: a getitem node for each of
    its outputs."""
    return _insert(graph, like, op, like.args, like.kwargs)


def _item(node: Any, op: Any, index: int) -> Any:
    """The op call that `node` is output `index` of (None if it is not)."""
    if (isinstance(node, torch.fx.Node) and node.target is operator.getitem and node.args[1] == index
            and isinstance(node.args[0], torch.fx.Node) and node.args[0].target is op):
        return node.args[0]
    return None


def _plain_rows(graph: torch.fx.Graph):
    """(node, what it quantizes through views) for each `fp8_rows` without the GELU, in graph order."""
    rows = torch.ops.ltx_tui.fp8_rows.default
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is rows and node.args[1:] == (False,) and not node.kwargs:
            base = node.args[0]
            while _is_view(base):
                base = base.args[0]
            if isinstance(base, torch.fx.Node):
                yield node, base


def _hand_over(graph: torch.fx.Graph, node: torch.fx.Node, *outs: Any) -> None:
    """The users of rows node `node` (its getitems: 0 the rows, 1 their scales, ...) take `outs` in
    that order; the node and what only it read go."""
    for user in list(node.users):
        user.replace_all_uses_with(outs[user.args[1]])
        graph.erase_node(user)
    read = node.args[0]
    graph.erase_node(node)
    _erase_dead(graph, read)


def _rows_of(node: torch.fx.Node, x_shape: tuple | None) -> list[torch.fx.Node]:
    """The fp8 row quantizations (`fp8_rows` without the GELU, `fp8_tensor_rows`) of `node` (B, ..., D)
    seen as (rows, D), when they are all its uses (through views); else none."""
    if x_shape is None:
        return []
    flat, found = (math.prod(x_shape[:-1]), x_shape[-1]), []
    rows, tensor = torch.ops.ltx_tui.fp8_rows.default, torch.ops.ltx_tui.fp8_tensor_rows.default
    pending = [node]
    while pending:
        for user in pending.pop().users:
            if _is_view(user):
                pending.append(user)
            elif (user.op == "call_function" and not user.kwargs and _shape(user.args[0]) == flat
                  and (user.target is tensor or (user.target is rows and user.args[1:] == (False,)))):
                found.append(user)
            else:
                return []
    return found


def _op(node: Any, name: str) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and str(node.target) == name


def _gate(node: Any, shape: tuple) -> bool:
    """Whether `node` is a broadcast factor (fewer elements than `shape`) of a floating dtype."""
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not val.is_floating_point() or val.numel() >= math.prod(shape):
        return False
    try:
        torch.broadcast_shapes(tuple(val.shape), shape)
    except RuntimeError:
        return False
    return True


def _residual(add: Any) -> tuple | None:
    """(x, y, gates) where `add` is x + y * gates (up to two broadcast gates; y and x contiguous, of the
    sum's shape and dtype), else None."""
    if not _op(add, "aten.add.Tensor") or add.kwargs or len(add.args) != 2:
        return None
    val = add.meta.get("val")
    for x, y in (add.args, add.args[::-1]):
        gates = []
        while _op(y, "aten.mul.Tensor") and not y.kwargs and len(gates) < 2:
            a, b = y.args
            full, g = (a, b) if _gate(b, tuple(val.shape)) else (b, a) if _gate(a, tuple(val.shape)) else (None, None)
            if full is None:
                break
            gates.insert(0, g)
            y = full
        vals = [n.meta.get("val") if isinstance(n, torch.fx.Node) else None for n in (x, y)]
        if all(isinstance(v, torch.Tensor) and v.shape == val.shape and v.dtype == val.dtype and v.is_contiguous()
               for v in vals):
            return x, y, gates
    return None


def _hoist(node: Any, before: torch.fx.Node, forbidden: torch.fx.Node, order: dict) -> bool:
    """Move `node` (and what it reads) before `before` if it is not there yet; False where it reads
    `forbidden` (nothing moved is wrong then: each node moves only ahead of its users)."""
    if node is forbidden:
        return False
    if not isinstance(node, torch.fx.Node) or order[node] < order[before]:
        return True
    if node.op != "call_function" or not all(_hoist(a, before, forbidden, order) for a in node.all_input_nodes):
        return False
    before.prepend(node)
    order[node] = order[before] - 0.5
    return True


ENABLED = True  # bench/ltx2_dit.py's `:unshared` ablation turns it off
FOLD = True  # bench/ltx2_dit.py's `:unfolded` ablation turns the folding of dequantized rows and norms off
ADDS = True  # bench/ltx2_dit.py's `:adds-apart` ablation leaves the residual adds out of the norms


class SharedRows(CustomGraphPass):
    """Fold `fp8_rows` of dequantized rows; drop an `ltx_tui::fp8_rows` whose input and `gelu` an
    earlier one in the graph had; fold the norm before the one `fp8_rows` of its output into it."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        if FOLD:
            self._fold(graph)
        if ENABLED:
            self._share(graph)
        if FOLD:
            from backends.runtime import fast_norm, fused_ff, v_e4m3  # noqa: F401 - register the ops the folds name

            self._fold_norms(graph)
            self._fold_tensor_rows(graph)
            if ADDS:
                self._fold_adds(graph)
            self._fold_ff_residual(graph)
            self._fold_v(graph)

    @staticmethod
    def _fold(graph: torch.fx.Graph) -> None:
        dequant = torch.ops.ltx_tui.fp8_dequant_rows.default
        for node, base in _plain_rows(graph):
            if not (isinstance(base, torch.fx.Node) and base.target is dequant):
                continue
            q, scale = base.args[:2]
            if _shape(q) is not None and _shape(q) == _shape(node.args[0]):
                _hand_over(graph, node, q, scale)

    @staticmethod
    def _share(graph: torch.fx.Graph) -> None:
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

    @staticmethod
    def _fold_norms(graph: torch.fx.Graph) -> None:
        ops = torch.ops.ltx_tui
        for node, base in _plain_rows(graph):
            x_shape = _shape(base)
            if x_shape is None or _shape(node.args[0]) != (math.prod(x_shape[:-1]), x_shape[-1]) or not _only_use(base, node):
                continue
            if base.target is ops.ada_zero.default:
                q, scale = _call(graph, ops.ada_zero_rows.default, base)
            elif ((post := _item(base, ops.post_sa.default, 1)) is not None
                  and all(u is base or u.args[1] == 0 for u in post.users)):
                res, q, scale = _call(graph, ops.post_sa_rows.default, post)
                for user in list(post.users):  # the residual, output 0, from the new op
                    if user is not base:
                        user.replace_all_uses_with(res)
                        graph.erase_node(user)
            else:
                continue
            _hand_over(graph, node, q, scale)

    @staticmethod
    def _fold_tensor_rows(graph: torch.fx.Graph) -> None:
        """An ada_zero whose uses are all fp8 rows of it, one scale a tensor for one of them at least (a
        FusedFeedForward's or a VProjection's input; the others row-scaled: LTX-2's to_q and to_k),
        writes the rows itself by one scale bounded from its modulation (`ada_bound`), which also bounds
        the rows' norms; row-scaled users take that scale as each row's."""
        ops = torch.ops.ltx_tui
        for base in list(graph.nodes):
            if not _op(base, str(ops.ada_zero.default)) or base.kwargs:
                continue
            x_shape = _shape(base)
            users = _rows_of(base, x_shape)
            if not any(u.target is ops.fp8_tensor_rows.default for u in users):
                continue
            x, eps, scale, shift = base.args
            fixed, norm = _insert(graph, base, ops.ada_bound.default, (scale, shift, x_shape[-1]))
            q, rows = _insert(graph, base, ops.ada_zero_rows.default, (x, eps, scale, shift, fixed))
            for user in users:
                _hand_over(graph, user, q, rows, norm)

    @staticmethod
    def _fold_v(graph: torch.fx.Graph) -> None:
        """v of `sdpa_fp8_rows` from a `fp8_tensor_mm` it alone reads (through views): the GEMM writes v
        in e4m3 with its scale (`fp8_tensor_mm_e4m3`), which the attention takes as they are."""
        ops = torch.ops.ltx_tui
        attention, mm = ops.sdpa_fp8_rows.default, ops.fp8_tensor_mm.default
        for node in list(graph.nodes):
            if (node.op != "call_function" or node.target is not attention or node.kwargs
                    or len(node.args) < 5 or node.args[5:] not in ((), (None,))):
                continue
            v = node.args[2]
            src = v
            while _is_view(src):
                src = src.args[0]
            if not (isinstance(src, torch.fx.Node) and src.target is mm and not src.kwargs and _only_use(src, node)):
                continue
            v8, s_v = _insert(graph, node, ops.fp8_tensor_mm_e4m3.default, src.args[:7])
            view = _insert(graph, node, v.target, (v8, v.args[1])) if v is not src else v8  # the shape's own args
            outs = _insert(graph, node, attention, (*node.args[:2], view, *node.args[3:5], s_v))
            _hand_over(graph, node, *outs)
            _erase_dead(graph, v)  # its views, then the GEMM

    @staticmethod
    def _fold_ff_residual(graph: torch.fx.Graph) -> None:
        """x + ff_fp8(...) * gate, one gate row (its channels; the product used by the add alone), becomes
        ff_fp8 adding it in FF2's epilogue."""
        from kernels.lt_ff import one_row

        ff = torch.ops.ltx_tui.ff_fp8.default
        for add in list(graph.nodes):
            parts = _residual(add)
            if parts is None:
                continue
            x, y, gates = parts
            src = y
            while _is_view(src):
                src = src.args[0]
            mul = next((a for a in add.args if a is not x), None)
            shape = _shape(add)
            if (not isinstance(src, torch.fx.Node) or src.target is not ff or src.kwargs or len(src.args) != 13
                    or src.args[11:] != (None, None) or len(gates) != 1 or not _op(mul, "aten.mul.Tensor")
                    or not _only_use(src, mul) or not _only_use(mul, add)
                    or not one_row(_shape(gates[0]) or (), shape[-1])):
                continue
            add.replace_all_uses_with(_insert(graph, add, ff, (*src.args[:11], x, gates[0])))
            _erase_gates(graph, add)
            _erase_dead(graph, y)

    @staticmethod
    def _fold_adds(graph: torch.fx.Graph) -> None:
        ops = torch.ops.ltx_tui
        norms_of: dict[torch.fx.Node, list[torch.fx.Node]] = {}
        for node in graph.nodes:
            if node.op == "call_function" and node.target is ops.ada_zero_rows.default and not node.kwargs:
                norms_of.setdefault(node.args[0], []).append(node)
        for add, norms in norms_of.items():
            parts = _residual(add)
            if parts is None:
                continue
            norms = [n for n in norms if n.args[1] == norms[0].args[1]][:2]  # one eps, at most two
            order = {n: i for i, n in enumerate(graph.nodes)}
            first = min(add.users, key=order.__getitem__)
            if not all(_hoist(a, first, add, order) for n in norms for a in n.args[2:5]):  # scale, shift, fixed
                continue
            x, y, gates = parts
            fixed = [n.args[4] if len(n.args) > 4 else n.kwargs.get("fixed") for n in norms]
            args = (x, y, gates, norms[0].args[1], [n.args[2] for n in norms], [n.args[3] for n in norms], fixed)
            val = [a.meta["val"] for a in (x, y, *gates)]
            with detect_fake_mode(val) or nullcontext():
                out = ops.add_ada_zero_rows.default(val[0], val[1], val[2:], args[3],
                                                    [n.meta["val"] for n in args[4]], [n.meta["val"] for n in args[5]],
                                                    [None if f is None else f.meta["val"] for f in fixed])
            with graph.inserting_before(first):
                node = graph.call_function(ops.add_ada_zero_rows.default, args)
                node.meta["val"] = out
                items = [graph.call_function(operator.getitem, (node, i)) for i in range(len(out))]
            for item, v in zip(items, out):
                item.meta["val"] = v
            add.replace_all_uses_with(items[0])  # the norms too, until they go
            for i, norm in enumerate(norms):
                _hand_over(graph, norm, items[1 + 2 * i], items[2 + 2 * i])
            _erase_gates(graph, add)

    def uuid(self) -> Any:
        return get_hash_for_files((__file__,), repr((ENABLED, FOLD, ADDS)))


def install() -> bool:
    """Make `SharedRows` Inductor's post-grad custom pass (True: it is, now or already; False: another
    pass is there, or both its parts are off)."""
    import backends.runtime.fast_norm  # noqa: F401  (defines ltx_tui::ada_zero, post_sa and their _rows)
    import backends.runtime.quant  # noqa: F401  (defines ltx_tui::fp8_rows and ltx_tui::fp8_dequant_rows)

    if not (ENABLED or FOLD):
        return False
    current = config.post_grad_custom_post_pass
    if isinstance(current, SharedRows):
        return True
    if current is not None:
        return False
    config.post_grad_custom_post_pass = SharedRows()
    return True
