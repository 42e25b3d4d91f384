"""`ExportOptions` and `DiagnosticOptions`, and the plain settings that configure them.

The settings (``dynamic_shapes``, ``opset_version``, ``verbosity`` …) are the option fields a CLI
flag, an ``@export_target(...)`` decorator or an editor setting can give; they are declared once,
here, in the fields' metadata, and validated once, by `ExportOptions.from_settings`. A leaf module
(no torch), so the language server validates requests with it.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any

VERBOSITIES = ("debug", "info", "warning", "error")
OPTIMIZE_ONNXRUNTIME = "onnxruntime"  # ExportOptions.optimize: also onnxruntime's fusions (contrib ops)
VERIFY_DTYPES = ("float64", "float32", "float16", "bfloat16")  # the keys of ExportOptions.verify_tolerances


def _setting(default: Any, kind: type, help: str, **extra: Any) -> Any:
    return dataclasses.field(default=default, metadata={"setting": kind, "help": help, **extra})


@dataclasses.dataclass
class DiagnosticOptions:
    """Options for diagnostics (as in PyTorch 2.1).

    verbosity_level: `logging.INFO` records what a user should read; `logging.DEBUG` adds the
        per-node trail, graph dumps and torch's own log output.
    warnings_as_errors: turn every warning into an error, failing the export.
    """

    verbosity_level: int = logging.INFO
    warnings_as_errors: bool = _setting(False, bool, "fail the export on any warning")


@dataclasses.dataclass
class ExportOptions:
    """Options of an export (the seed's fields, plus a few it lacked).

    dynamic_shapes: True makes every input dimension symbolic (``dim_param`` names on graph inputs);
        or a torch.export spec by argument name or position (``{"x": {0: Dim("batch")}}``, derived
        dims such as ``2 * seq``, ``Dim.AUTO``/``DYNAMIC``/``STATIC``, None; in JSON-like settings a
        string: a dimension name, or "auto"/"dynamic"/"static"). See `exporter.capture.dynamic`.
    op_level_debug: compare every translated op with PyTorch on the real intermediate values (FXE0013).
    fake_context: the `ONNXFakeContext` from `enable_fake_mode()`; exports without weight memory.
    onnx_registry: the `OnnxRegistry` (custom ONNX functions); a shared default otherwise.
    diagnostic_options: verbosity and warnings-as-errors.
    opset_version: the ONNX opset to target (default: the registry's, 18).
    optimize: True (default): fold constants and remove dead code with onnxscript's optimizer, and
        rewrite to the standard ops of the target opset (``LayerNormalization``; ``Gelu`` from opset 20)
        and the patterns onnxruntime fuses; the model stays portable. ``"onnxruntime"``: that, plus
        onnxscript's onnxruntime fusions (``Attention``, ``SkipLayerNormalization``, ``Gelu`` … in the
        ``com.microsoft`` domain), for models that only onnxruntime will run. False: none of it.
    modularize: wrap each ``nn.Module`` call in an ONNX local function.
    second_size_check: run a dynamic export's model in onnxruntime at other sizes of its dynamic
        dimensions against eager PyTorch (`exporter.verify.second_size`); a mismatch fails the export.
    verify: run the final model in onnxruntime on the example inputs against eager PyTorch (FXE0021,
        `exporter.verify.accuracy`); a divergence fails the export at the first diverging source line.
    verify_tolerances: per-dtype (atol, rtol) overrides of verify's tolerances, by dtype name
        (``{"float32": (1e-3, 1e-2)}``; defaults in `exporter.verify.numerics.TOLERANCES`).
    """

    dynamic_shapes: Any = _setting(None, bool, "make every input dimension symbolic")
    op_level_debug: bool | None = _setting(None, bool, "compare every op with PyTorch (FXE0013)")
    fake_context: Any = None
    onnx_registry: Any = None  # OnnxRegistry
    diagnostic_options: DiagnosticOptions | None = None
    opset_version: int | None = _setting(None, int, "ONNX opset version (default 18)", flag="--opset", editor="opset")
    optimize: bool | str = _setting(True, bool, "run onnxscript's optimizer")  # or OPTIMIZE_ONNXRUNTIME (Python only)
    modularize: bool = _setting(True, bool, "wrap nn.Modules in ONNX functions")
    second_size_check: bool = _setting(True, bool, "check a dynamic export in onnxruntime at other sizes")
    verify: bool = _setting(False, bool, "verify the final model in onnxruntime against eager PyTorch (FXE0021)")
    verify_tolerances: dict[str, tuple[float, float]] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.optimize, bool) and self.optimize != OPTIMIZE_ONNXRUNTIME:
            raise ValueError(f"ExportOptions.optimize must be True, False or {OPTIMIZE_ONNXRUNTIME!r}, got {self.optimize!r}")
        unknown = sorted(set(self.verify_tolerances or ()) - set(VERIFY_DTYPES))
        if unknown:
            raise ValueError(f"ExportOptions.verify_tolerances: unknown dtypes {unknown}; known: {', '.join(VERIFY_DTYPES)}")

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ExportOptions:
        """Options from plain settings (see `SETTINGS`); raises `ValueError` with a one-line reason."""
        values = validate_settings(settings)
        verbosity = getattr(logging, values.pop("verbosity", "info").upper())
        diagnostic_options = DiagnosticOptions(verbosity, values.pop("warnings_as_errors", False))
        return cls(diagnostic_options=diagnostic_options, **values)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One plain setting: its name (an option field, a decorator keyword), type and help."""

    name: str
    kind: type  # bool, int or str
    default: Any
    help: str  # what the setting does when true (a --no- flag's help says "do not …")
    flag: str  # the CLI flag
    editor_key: str  # the key in the editor's "onnxlens" configuration and in request options
    choices: tuple[str, ...] = ()


def _settings() -> dict[str, Setting]:
    fields = [*dataclasses.fields(ExportOptions), *dataclasses.fields(DiagnosticOptions)]
    found = {}
    for f in fields:
        if "setting" not in f.metadata:
            continue
        kind = f.metadata["setting"]
        flag = f.metadata.get("flag") or ("--no-" if f.default is True else "--") + f.name.replace("_", "-")
        found[f.name] = Setting(f.name, kind, f.default, f.metadata["help"], flag, f.metadata.get("editor") or _camel(f.name))
    found["verbosity"] = Setting("verbosity", str, "info", "diagnostics detail", "--verbosity", "verbosity", VERBOSITIES)
    return found


def _camel(name: str) -> str:
    return re.sub(r"_(\w)", lambda m: m.group(1).upper(), name)


SETTINGS: dict[str, Setting] = _settings()


def validate_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Check names, types and choices of plain settings; None means "not set" and is dropped."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown export options {unknown}; known: {sorted(SETTINGS)}")
    values = {}
    for name, value in settings.items():
        if value is None:
            continue
        setting = SETTINGS[name]
        if setting.kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"export option {name!r} must be an integer, got {value!r}")
        if setting.kind is bool and not isinstance(value, bool) and not (name == "dynamic_shapes" and isinstance(value, (dict, list, tuple))):
            raise ValueError(f"export option {name!r} must be true or false" + (" or a dynamic shapes spec" if name == "dynamic_shapes" else "") + f", got {value!r}")
        if setting.kind is str:
            if not isinstance(value, str) or (setting.choices and value.lower() not in setting.choices):
                raise ValueError(f"export option {name!r} must be one of {', '.join(setting.choices)}, got {value!r}")
            value = value.lower()
        values[name] = value
    return values
