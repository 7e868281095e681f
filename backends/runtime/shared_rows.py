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
With the rows of one input shared, the fp8 GEMMs that multiply them by consecutive rows of one joint
weight (`quant.join_projections`: to_q, to_k, to_v of an attention) become one GEMM, whose column
slices their users read (`kernels.dit_qk` and `kernels.fp8_qkv` take such rows in place). Then a
residual add whose sum goes into one or two such AdaLN norms (LTX-2's `vx = vx + attn2(...)`
before the a2v and v2a norms of vx, `vx = vx + a2v(...) * gate * mask` before the feed-forward's)
joins them (`ltx_tui::add_ada_zero_rows`): the sum is written once and read by no other pass.
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

import backends.runtime.fast_norm  # noqa: F401  (defines ltx_tui::ada_zero, post_sa, add_ada_zero_rows, ...)
import backends.runtime.quant  # noqa: F401  (defines ltx_tui::fp8_rows and ltx_tui::fp8_dequant_rows)

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


def _refresh(graph: torch.fx.Graph, changed: set) -> None:
    """Recompute the fake value of every node downstream of `changed` from its inputs' (a view's strides
    change with its input's), in graph order."""
    for node in graph.nodes:
        if node in changed or node.op != "call_function" or "val" not in node.meta:
            continue
        if not any(a in changed for a in node.all_input_nodes):
            continue
        if node.target is operator.getitem:
            node.meta["val"] = node.args[0].meta["val"][node.args[1]]
        else:
            args = torch.fx.node.map_arg(node.args, lambda n: n.meta["val"])
            kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: n.meta["val"])
            node.meta["val"] = _fake(node.target, *args, **kwargs)
        changed.add(node)


def _erase_gates(graph: torch.fx.Graph, node: torch.fx.Node) -> None:
    """Erase `node` and the products it read, for as long as nothing else uses them."""
    if node.users:
        return
    read = [a for a in node.args if _op(a, "aten.mul.Tensor")]
    graph.erase_node(node)
    for a in read:
        _erase_gates(graph, a)


def _call(graph: torch.fx.Graph, op: Any, like: torch.fx.Node) -> list[torch.fx.Node]:
    """`op` called with the arguments of node `like`, inserted before it, and a getitem node for each of
    its outputs, each with the fake value Inductor reads (`meta["val"]`)."""
    def val(a):
        return a.meta["val"] if isinstance(a, torch.fx.Node) else a

    args, kwargs = [val(a) for a in like.args], {k: val(a) for k, a in like.kwargs.items()}
    with detect_fake_mode([v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]) or nullcontext():
        out = op(*args, **kwargs)
    with graph.inserting_before(like):
        node = graph.call_function(op, like.args, dict(like.kwargs))
        node.meta["val"] = out
        items = [graph.call_function(operator.getitem, (node, i)) for i in range(len(out))]
    for item, val in zip(items, out):
        item.meta["val"] = val
    return items


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


def _hand_over(graph: torch.fx.Graph, node: torch.fx.Node, q: Any, scale: Any) -> None:
    """The users of `fp8_rows` node `node` (its getitem 0, the rows, and 1, their scales) take `q` and
    `scale`; the node and what only it read go."""
    for user in list(node.users):
        user.replace_all_uses_with(q if user.args[1] == 0 else scale)
        graph.erase_node(user)
    read = node.args[0]
    graph.erase_node(node)
    _erase_dead(graph, read)


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


def _rows_of(node: Any, dim: int) -> tuple | None:
    """(base, start, stop) where `node` is base[start:stop] along `dim`, else None."""
    if _op(node, "aten.slice.Tensor") and not node.kwargs and len(node.args) == 4 and node.args[1] == dim:
        return node.args[0], node.args[2], node.args[3]
    return None


def _struct(node: Any) -> Any:
    """A key equal for nodes that compute the same view of the same node (an unsqueeze made twice)."""
    if _op(node, "aten.unsqueeze.default") or _is_view(node):
        return (str(node.target), _struct(node.args[0]), *node.args[1:])
    if isinstance(node, torch.fx.Node) and node.target is operator.getitem:  # an output taken twice
        return ("getitem", *node.args)
    return node


def _projection(node: Any) -> tuple | None:
    """(group key, (start, stop)) of a `_scaled_mm` that multiplies by rows start:stop of a joint weight
    (`quant.join_projections`: its scale and bias the same rows of theirs), else None."""
    if not (isinstance(node, torch.fx.Node) and node.target is torch.ops.aten._scaled_mm.default
            and not node.kwargs and len(node.args) == 8 and node.args[5] is None):
        return None
    a, b, sa, sb, bias = node.args[:5]
    w = _rows_of(b.args[0], 0) if _op(b, "aten.permute.default") and list(b.args[1]) == [1, 0] else None
    sc = _rows_of(sb.args[0], 0) if _op(sb, "aten.unsqueeze.default") and sb.args[1] == 0 else None
    bi = None if bias is None else _rows_of(bias, 0)
    if w is None or sc is None or sc[1:] != w[1:] or (bias is not None and (bi is None or bi[1:] != w[1:])):
        return None
    return (_struct(a), _struct(sa), w[0], sc[0], None if bi is None else bi[0], *node.args[6:]), w[1:]


def _fake(op: Any, *args: Any, **kwargs: Any) -> Any:
    """`op` on the fake values of `args` (nodes) and `kwargs` (values)."""
    vals = torch.fx.node.map_arg(args, lambda n: n.meta["val"])
    flat = [v for v in torch.utils._pytree.tree_leaves((vals, kwargs)) if isinstance(v, torch.Tensor)]
    with detect_fake_mode(flat) or nullcontext():
        return op(*vals, **kwargs)


def _emit(graph: torch.fx.Graph, op: Any, *args: Any) -> torch.fx.Node:
    node = graph.call_function(op, args)
    node.meta["val"] = _fake(op, *args)
    return node


class SharedRows(CustomGraphPass):
    """Fold `fp8_rows` of dequantized rows; drop an `ltx_tui::fp8_rows` whose input and `gelu` an
    earlier one in the graph had; fold the norm before the one `fp8_rows` of its output into it."""

    def __call__(self, graph: torch.fx.Graph) -> None:
        if FOLD:
            self._fold(graph)
        if ENABLED:
            self._share(graph)
            self._join(graph)
        if FOLD:
            self._fold_norms(graph)
            if ADDS:
                self._fold_adds(graph)

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
    def _join(graph: torch.fx.Graph) -> None:
        groups: dict[tuple, list] = {}
        for node in graph.nodes:
            found = _projection(node)
            if found is not None:
                groups.setdefault(found[0], []).append((found[1], node))
        aten = torch.ops.aten
        changed: set = set()
        for key, members in groups.items():
            members.sort(key=lambda m: m[0])
            runs = [[members[0]]]
            for m in members[1:]:
                if m[0][0] == runs[-1][-1][0][1]:
                    runs[-1].append(m)
                else:
                    runs.append([m])
            for run in (r for r in runs if len(r) > 1):
                order = {n: i for i, n in enumerate(graph.nodes)}
                first = min((n for _, n in run), key=order.__getitem__)
                lo, hi = run[0][0][0], run[-1][0][1]
                a, sa = first.args[0], first.args[2]
                w, sc, bias = key[2:5]
                with graph.inserting_before(first):
                    wt = _emit(graph, aten.permute.default, _emit(graph, aten.slice.Tensor, w, 0, lo, hi), [1, 0])
                    sb = _emit(graph, aten.unsqueeze.default, _emit(graph, aten.slice.Tensor, sc, 0, lo, hi), 0)
                    b = None if bias is None else _emit(graph, aten.slice.Tensor, bias, 0, lo, hi)
                    mm = _emit(graph, aten._scaled_mm.default, a, wt, sa, sb, b, None, *key[5:])
                    for (start, stop), node in run:
                        part = _emit(graph, aten.slice.Tensor, mm, 1, start - lo, stop - lo)
                        node.replace_all_uses_with(part)
                        changed.add(part)
                for _, node in run:
                    old = node.args[1:5]
                    graph.erase_node(node)
                    for arg in old:
                        _erase_dead(graph, arg)
        if changed:  # the projections' users now read column slices of one output: their fake values again
            _refresh(graph, changed)

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
            if not all(_hoist(a, first, add, order) for n in norms for a in n.args[2:4]):
                continue
            x, y, gates = parts
            args = (x, y, gates, norms[0].args[1], [n.args[2] for n in norms], [n.args[3] for n in norms])
            val = [a.meta["val"] for a in (x, y, *gates)]
            with detect_fake_mode(val) or nullcontext():
                out = ops.add_ada_zero_rows.default(val[0], val[1], val[2:], args[3],
                                                    [n.meta["val"] for n in args[4]], [n.meta["val"] for n in args[5]])
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
    if not (ENABLED or FOLD):
        return False
    current = config.post_grad_custom_post_pass
    if isinstance(current, SharedRows):
        return True
    if current is not None:
        return False
    config.post_grad_custom_post_pass = SharedRows()
    return True
