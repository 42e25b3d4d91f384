"""torchlib's functions are built on first use (`exporter.translate.torchlib_lazy`), and built the same as eagerly.

Each side runs in a fresh interpreter: the eager one imports torchlib the normal way, the lazy one
through `exporter.translate.registry.default_registry()`. Compilations are counted where onnxscript does them
(``Converter.translate_function_def``, one per script function) and signatures where it computes
them (``_schemas.op_signature_from_function``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import torch
from helpers import assert_matches_eager

import exporter
from exporter.translate import torchlib_lazy

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")

COUNTING = """
from onnxscript._internal import converter
from onnxscript.ir import _schemas

counts = {"compiled": 0, "signatures": 0}


def counted(function, key):
    def wrapper(*args, **kwargs):
        counts[key] += 1
        return function(*args, **kwargs)
    return wrapper


converter.Converter.translate_function_def = counted(converter.Converter.translate_function_def, "compiled")
_schemas.op_signature_from_function = counted(_schemas.op_signature_from_function, "signatures")
"""

EAGER_IMPORT = (  # what the registry imports: torchlib's ops and every module of the project's own
    "from onnxscript.function_libs.torch_lib import ops; import importlib, pkgutil, exporter.translate.ops as own; "
    "[importlib.import_module(f'exporter.translate.ops.{m.name}') for m in pkgutil.iter_modules(own.__path__)]"
)
LAZY_IMPORT = "from exporter.translate.registry import default_registry; default_registry()"

DESCRIBE = """
import dataclasses, json, sys
from onnxscript import values
from onnxscript.function_libs.torch_lib import registration

def canonical(value):
    # value as JSON, sets sorted (a signature has sets of allowed types)
    if dataclasses.is_dataclass(value):
        return {field.name: canonical(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, (set, frozenset)):
        return sorted((canonical(item) for item in value), key=str)
    if isinstance(value, (list, tuple)):
        return [canonical(item) for item in value]
    if isinstance(value, dict):
        return {str(key): canonical(item) for key, item in value.items()}
    return str(value)

def describe(function):
    proto = function.to_function_proto().SerializeToString().hex() if isinstance(function, values.OnnxFunction) else None
    kind = "script" if isinstance(function, values.OnnxFunction) else "traced" if isinstance(function, values.TracedOnnxFunction) else "other"
    return [kind, function.name, function.__name__, function.opset.domain, function.opset.version, canonical(function.op_signature), proto]

described = {}
for name, functions in registration.default_registry.items():
    for i, function in enumerate(functions.overloads):
        described[f"{name} {i}"] = describe(function)
    for i, function in enumerate(functions.complex):
        described[f"{name} complex {i}"] = describe(function)
for module in [m for m in sys.modules if m.startswith("onnxscript.function_libs.torch_lib.ops.")]:
    for attribute, function in vars(sys.modules[module]).items():  # with the unregistered helpers
        if isinstance(function, values.Op) and function.opset.domain != "":
            described[f"{module}.{attribute}"] = describe(function)
json.dump(described, sys.stdout)
"""


def _run(*code: str) -> str:
    """The standard output of `code` run in a fresh interpreter.

    Its string hashes are fixed: onnxscript orders a loop's carried values by iterating a set, so
    the value names in a function with a loop (torchlib's ``_aten_embedding_bag_onnx``) vary from
    one interpreter to the next, eager or lazy.
    """
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    return subprocess.run(
        [sys.executable, "-c", "\n".join(code)], capture_output=True, text=True, check=True, timeout=600, env=env
    ).stdout


def _counts(*code: str) -> dict[str, int]:
    return json.loads(_run(COUNTING, *code, "import json; print(json.dumps(counts))").splitlines()[-1])


def test_this_onnxscript_builds_torchlib_lazily():
    assert torchlib_lazy.supported()  # otherwise the exporter silently builds everything at import


def test_every_torchlib_function_is_built_as_an_eager_import_builds_it():
    """Each registered function, and each function in torchlib's modules (its private helpers too)."""
    eager = json.loads(_run(EAGER_IMPORT, DESCRIBE))
    lazy = json.loads(_run(LAZY_IMPORT, DESCRIBE))
    assert len(eager) > 400
    assert lazy.keys() == eager.keys()
    assert sum(kind == "script" for kind, *_ in eager.values()) > 40
    for key, description in eager.items():
        assert lazy[key] == description, key


def test_the_default_registry_builds_no_function():
    eager = _counts(EAGER_IMPORT)
    assert eager["compiled"] > 40 and eager["signatures"] > 400  # what the counters see of an eager import
    assert _counts(LAZY_IMPORT) == {"compiled": 0, "signatures": 0}


def test_an_export_builds_only_the_functions_it_uses():
    export_mlp = (
        "import sys, torch, exporter\n"
        f"sys.path.insert(0, {EXAMPLES!r})\n"
        "from mlp import MLPModel\n"
        "exporter.dynamo_export(MLPModel(), torch.randn(97, 8))"
    )
    assert _counts(LAZY_IMPORT, export_mlp) == {"compiled": 0, "signatures": 2}  # traced aten_linear, aten_sigmoid


def test_build_all_builds_what_an_eager_import_builds():
    eager = _counts(EAGER_IMPORT)
    lazy = _counts(LAZY_IMPORT, "from exporter.translate import torchlib_lazy; torchlib_lazy.build_all()")
    assert lazy == eager


class UsesScriptFunctions(torch.nn.Module):
    """Activations and arithmetic that torchlib writes as compiled script functions."""

    def forward(self, x, y):
        a = torch.nn.functional.hardswish(x) + torch.nn.functional.mish(y) + torch.nn.functional.softplus(x)
        b = torch.nn.functional.selu(y) + torch.nn.functional.logsigmoid(x) + torch.nn.functional.hardtanh(y)
        return (
            torch.nn.functional.glu(torch.cat([a, b], dim=-1)),
            torch.addcmul(x, y, a, value=0.5),
            torch.lerp(x, y, 0.3),
        )


def test_an_export_with_script_functions_matches_eager():
    model, x, y = UsesScriptFunctions(), torch.randn(3, 4), torch.randn(3, 4)
    for op in ("hardswish", "mish", "softplus", "selu", "log_sigmoid", "hardtanh", "glu", "addcmul"):
        (function,) = exporter.OnnxRegistry().get_op_functions("aten", op)
        assert isinstance(function.onnx_function, torchlib_lazy.LazyOnnxFunction), op
    assert_matches_eager(exporter.dynamo_export(model, x, y), model, (x, y), {})


def test_a_fork_server_export_builds_no_function():
    """The fork server's warm parent has built them all, so its forked exports do not."""
    export = (
        "counts.update(compiled=0, signatures=0)\n"
        "import torch, exporter\n"
        "model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Hardswish(), torch.nn.Mish())\n"
        "exporter.dynamo_export(model, torch.randn(2, 4))"
    )
    assert _counts("import onnxlens_server.warm", export) == {"compiled": 0, "signatures": 0}
    assert _counts(LAZY_IMPORT, export)["compiled"] == 2  # what it compiles without the warm-up
