"""Explicit type promotion (FXE0015), symbolic sizes given where ATen takes a Scalar, and real
tensors made complex.

ATen promotes mixed dtypes implicitly (``int_tensor + float_tensor`` computes in float); ONNX
operators need inputs of one type. Before translation, tensor inputs of elementwise operators
get a ``prims.convert_element_type`` to the dtype torch would compute in, following
`torch._prims_common.elementwise_dtypes`.
"""

from __future__ import annotations

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND as Kind
from torch._prims_common import elementwise_dtypes

from exporter.diagnostics import DiagnosticContext, Level, rules

aten = torch.ops.aten

# operator packet -> (promotion kind, indices of the arguments that take part in promotion)
_RULES: dict[object, tuple[Kind, tuple[int, ...]]] = {}


def _rule(kind: Kind, args: tuple[int, ...], *packets) -> None:
    for packet in packets:
        _RULES[packet] = (kind, args)


_rule(
    Kind.DEFAULT,
    (0, 1),
    aten.add,
    aten.sub,
    aten.mul,
    aten.maximum,
    aten.minimum,
    aten.fmod,
    aten.remainder,
    aten.bitwise_and,
    aten.bitwise_or,
    aten.bitwise_xor,
    aten.floor_divide,
    aten.fmax,
    aten.fmin,
)
_rule(Kind.INT_TO_FLOAT, (0, 1), aten.atan2, aten.true_divide, aten.copysign, aten.xlogy, aten.hypot)
_rule(
    Kind.ALWAYS_BOOL,
    (0, 1),
    aten.eq,
    aten.ne,
    aten.lt,
    aten.le,
    aten.gt,
    aten.ge,
    aten.logical_and,
    aten.logical_or,
    aten.logical_xor,
)
_rule(Kind.BOOL_TO_LONG, (0, 1), aten.pow)
_rule(Kind.DEFAULT, (1, 2), aten.where)
_rule(Kind.DEFAULT, (0, 1, 2), aten.lerp, aten.addcmul, aten.addcdiv)


# The dtypes of symbolic sizes in the ONNX graph (torchlib computes SymFloats in float32).
_SYMBOLIC_DTYPES = {torch.SymInt: torch.int64, torch.SymFloat: torch.float32, torch.SymBool: torch.bool}

# Reductions that accumulate bool/integer inputs in the (wider) dtype of their result.
_RESULT_TYPED = {aten.sum, aten.prod, aten.cumsum, aten.cumprod}


def _kind(node: torch.fx.Node) -> tuple[Kind | None, tuple[int, ...]] | None:
    """The promotion kind (None: cast to the result dtype) and the promoted argument positions."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return None
    if target.overloadpacket is aten.div:
        rounding = node.kwargs.get("rounding_mode")
        return (Kind.DEFAULT if rounding else Kind.INT_TO_FLOAT), (0, 1)
    if target.overloadpacket in _RESULT_TYPED and isinstance(node.meta.get("val"), torch.Tensor):
        return None, (0,)
    return _RULES.get(target.overloadpacket) or _integer_to_float(node)


def _integer_to_float(node: torch.fx.Node) -> tuple[None, tuple[int, ...]] | None:
    """A pointwise operator of one integer or bool tensor whose result is floating (``torch.sqrt(n)``,
    ``n.sigmoid()``, ``n.clamp(max=0.5)``) computes in the result's dtype."""
    result = node.meta.get("val")
    if torch.Tag.pointwise not in node.target.tags or not (
        isinstance(result, torch.Tensor) and result.is_floating_point()
    ):
        return None
    tensors = [i for i, arg in enumerate(node.args) if isinstance(_promotion_value(arg), torch.Tensor)]
    if (
        len(tensors) != 1
        or _promotion_value(node.args[tensors[0]]).is_floating_point()
        or _promotion_value(node.args[tensors[0]]).is_complex()
    ):
        return None
    return None, (tensors[0],)


def _symbolic_scalars_as_tensors(module: torch.fx.GraphModule, node: torch.fx.Node) -> int:
    """A symbolic size given as a Scalar argument (``x ** (n - 1)``, ``x.masked_fill(m, n)``): the
    operator's Tensor overload instead, with the size as a scalar tensor (torchlib takes a Scalar as
    a constant). Returns how many arguments became tensors."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or not any(
        type(_promotion_value(a)) in _SYMBOLIC_DTYPES for a in node.args
    ):
        return 0
    params = target._schema.arguments
    symbolic = {
        i
        for i, (param, arg) in enumerate(zip(params, node.args))
        if _is(param.type, "NumberType") and type(_promotion_value(arg)) in _SYMBOLIC_DTYPES
    }
    if not symbolic:
        return 0
    for name in target.overloadpacket.overloads():
        overload = getattr(target.overloadpacket, name)
        others = overload._schema.arguments
        if len(others) == len(params) and all(
            _is(b.type, "TensorType") if i in symbolic else str(a.type) == str(b.type)
            for i, (a, b) in enumerate(zip(params, others))
        ):
            break
    else:
        return 0
    args = list(node.args)
    like = next(v for v in (_promotion_value(a) for a in args) if isinstance(v, torch.Tensor))
    for i in symbolic:
        with module.graph.inserting_before(node):
            args[i] = module.graph.call_function(
                torch.ops.aten.scalar_tensor.default,
                (args[i],),
                {"dtype": _SYMBOLIC_DTYPES[type(_promotion_value(args[i]))]},
            )
        args[i].meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
        args[i].meta["val"] = like.new_empty((), dtype=args[i].kwargs["dtype"])
    node.target, node.args = overload, tuple(args)
    return len(symbolic)


def _real_to_complex(module: torch.fx.GraphModule, node: torch.fx.Node) -> int:
    """``x.to(torch.complex64)`` of a real tensor (FFTs of real inputs): ``complex(x, 0)`` (complex
    tensors are their real representation in ONNX, so a cast alone would drop the imaginary axis)."""
    if node.target is not torch.ops.aten._to_copy.default:
        return 0
    val, source = node.meta.get("val"), _promotion_value(node.args[0])
    if not (
        isinstance(val, torch.Tensor)
        and val.is_complex()
        and isinstance(source, torch.Tensor)
        and not source.is_complex()
    ):
        return 0
    with module.graph.inserting_before(node):
        pair = _as_complex(module.graph, node.args[0], val.dtype, node)
    node.replace_all_uses_with(pair)
    module.graph.erase_node(node)
    return 1


def _as_complex(graph: torch.fx.Graph, value: object, dtype: torch.dtype, user: torch.fx.Node) -> torch.fx.Node:
    """``complex(x, 0)`` of a real tensor node or a number (a complex number: its two parts), of the complex
    `dtype`, inserted at the graph's insertion point and located at `user`."""
    real_dtype = dtype.to_real()
    if isinstance(value, torch.fx.Node):
        source = value.meta["val"]
        real = graph.call_function(torch.ops.prims.convert_element_type.default, (value, real_dtype))
        imag = graph.call_function(torch.ops.aten.zeros_like.default, (real,))
        real_val, pair_val = source.to(real_dtype), source.to(dtype)
    else:
        number = complex(value)
        real = graph.call_function(torch.ops.aten.scalar_tensor.default, (number.real,), {"dtype": real_dtype})
        imag = graph.call_function(torch.ops.aten.scalar_tensor.default, (number.imag,), {"dtype": real_dtype})
        like = user.meta["val"]
        real_val, pair_val = like.new_empty((), dtype=real_dtype), like.new_empty((), dtype=dtype)
    pair = graph.call_function(torch.ops.aten.complex.default, (real, imag))
    for new, val in ((real, real_val), (imag, real_val), (pair, pair_val)):
        new.meta.update({k: v for k, v in user.meta.items() if k in ("stack_trace", "nn_module_stack")})
        new.meta["val"] = val
    return pair


def _complex_operands(
    graph: torch.fx.Graph, node: torch.fx.Node, promoted_args: list[tuple[int, object]], dtype: torch.dtype
) -> int:
    """The real operands of an elementwise operator that computes in a complex `dtype` made complex: a real
    tensor ``complex(x, 0)``, a number a complex constant. torchlib's complex functions take both operands in
    the real representation (``[..., 2]``): given a real one, they slice its last axis as if it were the
    parts (``c + 1.5`` added 1.5 to both). Returns how many operands were replaced."""
    params = node.target._schema.arguments
    replaced = 0
    for i, arg in promoted_args:
        val = _promotion_value(arg)
        tensor = isinstance(val, torch.Tensor)
        if tensor and val.is_complex():
            continue
        if not tensor and not (isinstance(val, (int, float, complex)) and _is(params[i].type, "TensorType")):
            continue
        with graph.inserting_before(node):
            node.update_arg(i, _as_complex(graph, arg, dtype, node))
        replaced += 1
    return replaced


def _is(jit_type: torch._C.JitType, kind: str) -> bool:
    """Whether a schema type is `kind`, or an Optional of it."""
    return jit_type.kind() == kind or (jit_type.kind() == "OptionalType" and jit_type.getElementType().kind() == kind)


def _promotion_value(arg: object) -> object:
    if isinstance(arg, torch.fx.Node):
        return arg.meta.get("val")
    return arg


def insert_type_promotion(module: torch.fx.GraphModule, ctx: DiagnosticContext) -> int:
    """Insert the casts; returns how many were inserted."""
    inserted = 0
    for node in list(module.graph.nodes):
        if node.op != "call_function":
            continue
        inserted += _symbolic_scalars_as_tensors(module, node) + _real_to_complex(module, node)
        rule = _kind(node)
        if rule is None:
            continue
        kind, positions = rule
        promoted_args = [(i, node.args[i]) for i in positions if i < len(node.args)]
        values = [_promotion_value(a) for _, a in promoted_args]
        if not any(isinstance(v, torch.Tensor) for v in values) or any(v is None for v in values):
            continue
        if kind is None:
            result_dtype = node.meta["val"].dtype
        else:
            try:
                _, result_dtype = elementwise_dtypes(
                    *values, type_promotion_kind=kind if kind != Kind.ALWAYS_BOOL else Kind.DEFAULT
                )
            except Exception:  # not promotable (e.g. unusual argument types): leave the node alone
                continue
        like = next(v for v in values if isinstance(v, torch.Tensor))
        if result_dtype.is_complex:
            inserted += _complex_operands(module.graph, node, promoted_args, result_dtype)
            continue
        for i, arg in promoted_args:
            val = _promotion_value(arg)
            dtype = val.dtype if isinstance(val, torch.Tensor) else _SYMBOLIC_DTYPES.get(type(val))
            if not isinstance(arg, torch.fx.Node) or dtype is None or dtype == result_dtype:
                continue
            with module.graph.inserting_before(node):
                if isinstance(val, torch.Tensor):
                    cast = module.graph.call_function(torch.ops.prims.convert_element_type.default, (arg, result_dtype))
                    cast.meta["val"] = val.to(result_dtype)
                else:  # a symbolic size (``x.sum() / x.shape[0]``): a scalar tensor of the computation's dtype
                    cast = module.graph.call_function(
                        torch.ops.aten.scalar_tensor.default, (arg,), {"dtype": result_dtype}
                    )
                    cast.meta["val"] = like.new_empty((), dtype=result_dtype)
            cast.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
            node.update_arg(i, cast)
            inserted += 1
            ctx.report(
                rules.FX_NODE_INSERT_TYPE_PROMOTION,
                Level.NONE,
                f"Cast argument {i} of {node.name} ({node.target}) from {dtype} to {result_dtype}.",
                node=node,
                fromDtype=str(dtype),
                toDtype=str(result_dtype),
            )
    if inserted:
        module.recompile()
    return inserted
