"""Record onnxscript calls as ONNX IR nodes.

torchlib functions are written in onnxscript. Called under an `OpRecorder` (an onnxscript
evaluator), every ONNX op they use is appended as an `onnx_ir.Node` instead of being executed.
Python constants passed where the schema expects a tensor become `Constant` nodes (deduplicated),
lists mixing symbolic values and ints become a 1-D `Concat`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import onnx_ir as ir
import onnxscript
from onnxscript import evaluator

Arg = Any  # ir.Value | Python constant | sequence of either | None


class SymbolicValue(ir.Value):
    """An `ir.Value` with the Python operators torchlib's traced functions use beyond + - * / and
    unary - (which every `ir.Value` gets from the magic handler `OpRecorder.recording` installs)."""

    def __init__(self, opset: onnxscript.values.Opset, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._opset = opset

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    def __matmul__(self, other):
        return self._opset.MatMul(self, other)

    def __pow__(self, other):
        return self._opset.Pow(self, other)

    def __mod__(self, other):
        fmod = 1 if self.dtype in _FLOAT_TYPES else 0
        return self._opset.Mod(self, other, fmod=fmod)

    def __lt__(self, other):
        return self._opset.Less(self, other)

    def __le__(self, other):
        return self._opset.LessOrEqual(self, other)

    def __gt__(self, other):
        return self._opset.Greater(self, other)

    def __ge__(self, other):
        return self._opset.GreaterOrEqual(self, other)

    def __rand__(self, other):
        return self._opset.And(other, self)

    __hash__ = ir.Value.__hash__


_FLOAT_TYPES = {ir.DataType.FLOAT, ir.DataType.DOUBLE, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}


class OpRecorder(evaluator.Evaluator):
    """An onnxscript evaluator that appends the ops it is asked to run to `nodes`."""

    def __init__(self, opset: onnxscript.values.Opset) -> None:
        self.opset = opset
        self.nodes: list[ir.Node] = []
        self.functions: dict[ir.OperatorIdentifier, ir.Function] = {}
        self._constants: dict[tuple[Any, ir.DataType], ir.Value] = {}

    @contextlib.contextmanager
    def recording(self) -> Iterator[OpRecorder]:
        previous = ir.set_value_magic_handler(self.opset)
        try:
            with evaluator.default_as(self):
                yield self
        finally:
            ir.set_value_magic_handler(previous)

    # -- onnxscript evaluator protocol -------------------------------------------------

    def eval_op(self, op: onnxscript.values.Op, args: Sequence[Arg], kwargs: Mapping[str, Arg]):
        signature = _signature(op)
        if signature is None:
            raise ValueError(f"ONNX op {op.name!r} has no schema in opset {op.opset}")
        inputs, attrs = bind(signature, args, kwargs)
        # An op of another default-domain opset than the model's (torchlib's functions are written for 18) keeps
        # its version: `finalize` converts it to the model's opset (DFT's axis, for one, moved to an input in 20).
        written_for = op.opset.version if not op.opset.domain and op.opset.version != self.opset.version else None
        outputs = self._add_node(signature, inputs, attrs, _output_count(signature, attrs), written_for)
        return outputs[0] if len(outputs) == 1 else outputs

    def eval_function(self, function: onnxscript.OnnxFunction, args: Sequence[Arg], kwargs: Mapping[str, Arg]):
        signature = function.op_signature
        ir_function = function.function_ir
        inputs, attrs = bind(signature, args, kwargs)
        outputs = self._add_node(signature, inputs, attrs, len(ir_function.outputs))
        self.functions[ir_function.identifier()] = ir_function
        return outputs[0] if len(outputs) == 1 else outputs

    # -- entry point used by the translator ----------------------------------------------

    def call(self, function: Any, args: Sequence[Arg], kwargs: Mapping[str, Arg]) -> Any:
        """Call a torchlib-style function with FX-level arguments, recording what it emits.

        Traced functions run their Python body directly (it may inspect Python lists and
        numbers); compiled `OnnxFunction`s come back through `eval_function`.
        """
        with self.recording():
            return function(*args, **kwargs)

    def constant(self, value: Any, dtype: ir.DataType) -> ir.Value:
        """A (deduplicated) Constant node holding `value`."""
        if isinstance(value, list):
            value = tuple(value)
        if isinstance(value, complex):
            value = (value.real, value.imag)
        key = (value, dtype)
        if key not in self._constants:
            with self.recording():
                self._constants[key] = self.opset.Constant(value=ir.tensor(value, dtype=dtype))
        return self._constants[key]

    # -- internals -----------------------------------------------------------------------

    def _add_node(
        self, signature, inputs: dict[str, Arg], attrs: dict[str, Any], num_outputs: int, version: int | None = None
    ):
        inputs = self._materialize_constants(signature, inputs)
        inputs = self._materialize_sequences(signature, inputs)
        flat: list[ir.Value | None] = []
        for value in inputs.values():
            if isinstance(value, (list, tuple)):
                flat.extend(value)
            else:
                flat.append(value)
        while flat and flat[-1] is None:
            flat.pop()
        attributes = [a for a in ir.convenience.convert_attributes(attrs) if a.value is not None]
        node = ir.Node(
            signature.domain,
            signature.name,
            inputs=flat,
            attributes=attributes,
            outputs=[SymbolicValue(self.opset) for _ in range(num_outputs)],
            version=signature.since_version if signature.domain else version,
        )
        self.nodes.append(node)
        return node.outputs

    def _materialize_constants(self, signature, inputs: dict[str, Arg]) -> dict[str, Arg]:
        """Turn Python constants given for tensor parameters into Constant nodes."""
        bound_types = {
            signature.params_map[name].type_constraint: value.dtype
            for name, value in inputs.items()
            if isinstance(value, ir.Value) and value.dtype is not None
        }
        result = {}
        for name, value in inputs.items():
            param = signature.params_map[name]
            if (
                value is None
                or isinstance(value, ir.Value)
                or param.variadic
                or _is_sequence_param(param)
                or (isinstance(value, (list, tuple)) and any(isinstance(v, ir.Value) for v in value))
            ):
                result[name] = value
                continue
            if isinstance(value, ir.TensorProtocol):
                with self.recording():
                    result[name] = self.opset.Constant(value=value)
            else:
                dtype = bound_types.get(param.type_constraint) or _infer_dtype(param, value)
                result[name] = self.constant(value, dtype)
        return result

    def _materialize_sequences(self, signature, inputs: dict[str, Arg]) -> dict[str, Arg]:
        """Lists of values become a Sequence (for sequence params) or a 1-D Concat."""
        result = {}
        for name, value in inputs.items():
            param = signature.params_map[name]
            if not isinstance(value, (list, tuple)) or not value:
                result[name] = value
                continue
            with self.recording():
                if _is_sequence_param(param):
                    result[name] = self.opset.SequenceConstruct(*value)
                elif param.variadic:
                    dtype = _infer_dtype(param, value)
                    result[name] = [v if isinstance(v, ir.Value) else self.constant(v, dtype) for v in value]
                else:
                    dtype = _infer_dtype(param, value)
                    pieces = [self._as_1d(v, dtype) for v in value if v is not None]
                    result[name] = self.opset.Concat(*pieces, axis=0)
        return result

    def _as_1d(self, value: Arg, dtype: ir.DataType) -> ir.Value:
        if not isinstance(value, ir.Value):
            return self.constant([value], dtype)
        if value.shape is not None and len(value.shape) == 1:
            return value
        return self.opset.Reshape(value, self.constant([-1], ir.DataType.INT64))


_SIGNATURES: dict[tuple[str, str, int], ir.schemas.OpSignature] = {}


def _signature(op: onnxscript.values.Op) -> ir.schemas.OpSignature | None:
    """``op.op_signature``, built once per ONNX schema: onnxscript's opsets make a new `Op`, and so a new
    signature, for every call (a third of an 8-layer decoder's translation)."""
    schema = op.op_schema
    if schema is None:
        return None
    key = (schema.domain, schema.name, schema.since_version)
    if key not in _SIGNATURES:
        _SIGNATURES[key] = op.op_signature
    return _SIGNATURES[key]


def bind(signature, args: Sequence[Arg], kwargs: Mapping[str, Arg]) -> tuple[dict[str, Arg], dict[str, Any]]:
    """Split call arguments into named ONNX inputs and attributes following `signature`."""
    inputs: dict[str, Arg] = {}
    attrs: dict[str, Any] = {}
    pending = list(args)
    for param in signature.params:
        if isinstance(param, ir.schemas.Parameter):
            if pending:
                if param.variadic:
                    inputs[param.name] = tuple(pending)
                    pending.clear()
                else:
                    inputs[param.name] = pending.pop(0)
            elif param.name in kwargs:
                inputs[param.name] = kwargs[param.name]
            elif param.required:
                raise TypeError(f"{signature.name}: missing required input {param.name!r}")
            else:
                inputs[param.name] = None
        else:
            if pending:
                value = pending.pop(0)
            elif param.name in kwargs:
                value = kwargs[param.name]
            else:
                value = param.default
            if value is None:
                if param.required:
                    raise TypeError(f"{signature.name}: missing required attribute {param.name!r}")
                continue
            if isinstance(value, ir.Attr):
                value = ir.Attr(param.name, value.type, value.value)
            elif isinstance(value, int) and not isinstance(value, bool) and param.type == ir.AttributeType.FLOAT:
                value = float(value)
            attrs[param.name] = value
    return inputs, attrs


def _is_sequence_param(param: ir.schemas.Parameter) -> bool:
    allowed = param.type_constraint.allowed_types
    return bool(allowed) and all(isinstance(t, ir.SequenceType) for t in allowed)


def _infer_dtype(param: ir.schemas.Parameter, value: Arg) -> ir.DataType:
    allowed = param.type_constraint.allowed_types
    if len(allowed) == 1:
        return next(iter(allowed)).dtype
    if isinstance(value, (list, tuple)):
        for v in value:
            if isinstance(v, ir.Value) and v.dtype is not None:
                return v.dtype
        if any(isinstance(v, float) for v in value):
            return ir.DataType.FLOAT
        return ir.DataType.INT64
    if isinstance(value, bool):
        return ir.DataType.BOOL
    if isinstance(value, int):
        return ir.DataType.INT64
    if isinstance(value, (float, complex)):
        return ir.DataType.FLOAT
    if isinstance(value, str):
        return ir.DataType.STRING
    raise TypeError(f"cannot determine the ONNX type of {value!r} for input {param.name!r}")


def _output_count(signature, attrs: Mapping[str, Any]) -> int:
    if signature.domain == "":
        if signature.name == "BatchNormalization" and not attrs.get("training_mode", 0):
            return 1
        if signature.name == "Split" and isinstance(attrs.get("num_outputs"), int):
            return attrs["num_outputs"]
    return len(signature.outputs)
