"""`ExportOptions` and `DiagnosticOptions`, and the plain settings that configure them.

The settings (``dynamic_shapes``, ``opset_version``, ``verbosity`` …) are the option fields a CLI
flag, an ``@export_target(...)`` decorator or an editor setting can give. Each is declared once,
here, in its field's metadata: its kind (`Flag`, `Integer`, `Choice`, `DynamicShapesSpec`: how a value
is checked, read from CLI text and described in JSON), default and help. `parse_settings` checks plain
values once; the parsed values then travel (`exporter.runner.merge_settings`,
`ExportOptions.from_parsed`). A leaf module (no torch), so the language server validates requests with it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from exporter.constants import DEFAULT_OPSET_VERSION

VERBOSITIES = ("debug", "info", "warning", "error")
OPTIMIZE_ONNXRUNTIME = "onnxruntime"  # ExportOptions.optimize: also onnxruntime's fusions (contrib ops)
VERIFY_DTYPES = ("float64", "float32", "float16", "bfloat16")  # the keys of ExportOptions.verify_tolerances
# The opsets a model can get: torchlib's functions are written in opset 18 and onnxscript's version
# converter takes them to 18 … 25 (its SUPPORTED_MIN/MAX_ONNX_OPSET; tests/test_options.py checks them).
OPSET_VERSIONS = range(18, 26)  # the default: DEFAULT_OPSET_VERSION (20)
PRECISIONS = ("fp32", "fp16", "int8", "int4")  # ExportOptions.precision (export_for_generation's weights)
# The settings only a text-generation export honours (its weights' precision); a plain export refuses them
WEIGHT_SETTINGS = ("precision", "block_size", "symmetric", "accuracy_level", "int8_head")


def check_opset(version: int) -> int:
    """`version` if a model can be exported at it; else a `ValueError` naming the valid range."""
    if isinstance(version, bool) or not isinstance(version, int) or version not in OPSET_VERSIONS:
        raise ValueError(
            f"opset_version must be an integer from {OPSET_VERSIONS[0]} to {OPSET_VERSIONS[-1]}, got {version!r}"
        )
    return version


class SettingError(ValueError):
    """A plain setting with a value its kind does not take."""


@dataclasses.dataclass(frozen=True)
class Flag:
    """True or false; on the CLI a ``--name`` flag (``--no-name`` when on by default)."""

    json_type = "boolean"

    def parse(self, value: Any) -> bool:
        if not isinstance(value, bool):
            raise SettingError(f"must be true or false, got {value!r}")
        return value

    def cli(self, setting: Setting) -> dict[str, Any]:
        negated = setting.default is True
        return {
            "action": "store_false" if negated else "store_true",
            "help": f"do not {setting.help}" if negated else setting.help,
        }


@dataclasses.dataclass(frozen=True)
class Integer:
    """An integer in ``minimum`` … ``maximum``."""

    minimum: int
    maximum: int
    json_type = "integer"

    def parse(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SettingError(f"must be an integer, got {value!r}")
        if not self.minimum <= value <= self.maximum:
            raise SettingError(f"must be from {self.minimum} to {self.maximum}, got {value!r}")
        return value

    def from_text(self, text: str) -> int:
        try:
            return self.parse(int(text))
        except ValueError as e:
            raise SettingError(str(e) if isinstance(e, SettingError) else f"must be an integer, got {text!r}") from None

    def cli(self, setting: Setting) -> dict[str, Any]:
        return {"type": _cli_type(self), "metavar": "N", "help": f"{setting.help}; {self.minimum} … {self.maximum}"}


@dataclasses.dataclass(frozen=True)
class Choice:
    """One of ``choices`` (any case)."""

    choices: tuple[str, ...]
    json_type = "string"

    def parse(self, value: Any) -> str:
        if not isinstance(value, str) or value.lower() not in self.choices:
            raise SettingError(f"must be one of {', '.join(self.choices)}, got {value!r}")
        return value.lower()

    def from_text(self, text: str) -> str:
        return self.parse(text)

    def cli(self, setting: Setting) -> dict[str, Any]:
        return {"type": _cli_type(self), "metavar": "{" + ",".join(self.choices) + "}", "help": setting.help}


@dataclasses.dataclass(frozen=True)
class DynamicShapesSpec:
    """True/false (every input dimension symbolic), or a spec by argument name (dict) or position
    (list), a string per dimension (a name, ``auto``, ``dynamic`` or ``static``); JSON text on the CLI,
    where the flag alone means true."""

    json_type = ("boolean", "object")

    def parse(self, value: Any) -> bool | dict | list:
        if not isinstance(value, (bool, dict, list, tuple)):
            raise SettingError(f"must be true or false or a dynamic shapes spec, got {value!r}")
        return list(value) if isinstance(value, tuple) else value

    def from_text(self, text: str) -> dict | list:
        try:
            spec = json.loads(text)
        except ValueError as e:
            raise SettingError(f"not JSON: {e}") from None
        if not isinstance(spec, (dict, list)):
            raise SettingError("a dynamic shapes spec is a JSON object (by argument name) or list")
        return spec

    def cli(self, setting: Setting) -> dict[str, Any]:
        example = '{"x": {"0": "batch"}}'
        return {
            "type": _cli_type(self),
            "nargs": "?",
            "const": True,
            "metavar": "SPEC",
            "help": f"{setting.help}; or only those of a JSON spec, e.g. '{example}' (a name, auto, dynamic or static per dim)",
        }


def _cli_type(kind: Integer | Choice | DynamicShapesSpec) -> Any:
    """An argparse ``type`` reading a flag's text with `kind` (its error becomes argparse's usage error)."""
    import argparse

    def read(text: str) -> Any:
        try:
            return kind.from_text(text)
        except SettingError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return read


Kind = Flag | Integer | Choice | DynamicShapesSpec


def _setting(default: Any, kind: Kind, help: str, **extra: Any) -> Any:
    return dataclasses.field(default=default, metadata={"setting": kind, "help": help, **extra})


@dataclasses.dataclass
class DiagnosticOptions:
    """Options for diagnostics (as in PyTorch 2.1).

    verbosity_level: `logging.INFO` records what a user should read; `logging.DEBUG` adds the
        per-node trail, graph dumps and torch's own log output.
    warnings_as_errors: turn every warning into an error, failing the export.
    """

    verbosity_level: int = logging.INFO
    warnings_as_errors: bool = _setting(False, Flag(), "fail the export on any warning")


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
    opset_version: the ONNX opset the model gets (`OPSET_VERSIONS`: 18 … 25), whatever the registry's;
        None: the registry's (`OnnxRegistry(opset_version=...)`), 20 by default. See `target_opset`.
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
    verify_tolerances: per-dtype (atol, rtol) overrides of the tolerances of verify and the second-size
        check, by dtype name (``{"float32": (1e-3, 1e-2)}``; defaults in `exporter.verify.numerics.TOLERANCES`).

    The settings of a text-generation export (`export_for_generation`; `dynamo_export` and a plain
    target given them refuse the weight settings, `refuse_weight_settings`; neither fuses kernels):
    precision: the weights' precision (`PRECISIONS`): ``int4``/``int8`` quantize the MatMul weights to
        onnxruntime's MatMulNBits (onnxruntime's ``MatMulNBitsQuantizer``), ``fp16`` halves every float.
    block_size: weights per quantization block (a power of two, 16 … 256; 32 as the genai builder).
    symmetric: symmetric quantization (no zero points), as the genai builder.
    accuracy_level: MatMulNBits' ``accuracy_level`` (0 … 4; 4: int8 compute, onnxruntime's fastest on CPU).
    int8_head: an int4 export keeps the output head (``lm_head``) in int8.
    fused_kernels: rewrite attention, rotary embeddings and normalizations to onnxruntime's fused
        kernels (``com.microsoft``); off: the portable standard-op graph.
    """

    dynamic_shapes: Any = _setting(None, DynamicShapesSpec(), "make every input dimension symbolic")
    op_level_debug: bool | None = _setting(None, Flag(), "compare every op with PyTorch (FXE0013)")
    fake_context: Any = None
    onnx_registry: Any = None  # OnnxRegistry
    diagnostic_options: DiagnosticOptions | None = None
    opset_version: int | None = _setting(
        None,
        Integer(OPSET_VERSIONS[0], OPSET_VERSIONS[-1]),
        f"ONNX opset version (default {DEFAULT_OPSET_VERSION})",
        flag="--opset",
        editor="opset",
    )
    optimize: bool | str = _setting(True, Flag(), "run onnxscript's optimizer")  # or OPTIMIZE_ONNXRUNTIME (Python only)
    modularize: bool = _setting(True, Flag(), "wrap nn.Modules in ONNX functions")
    second_size_check: bool = _setting(True, Flag(), "check a dynamic export in onnxruntime at other sizes")
    verify: bool = _setting(False, Flag(), "verify the final model in onnxruntime against eager PyTorch (FXE0021)")
    verify_tolerances: dict[str, tuple[float, float]] | None = None
    precision: str = _setting("fp32", Choice(PRECISIONS), "weight precision of a text-generation export")
    block_size: int = _setting(32, Integer(16, 256), "weights per quantization block of an int4/int8 export")
    symmetric: bool = _setting(True, Flag(), "quantize symmetrically (no zero points)")
    accuracy_level: int = _setting(
        4, Integer(0, 4), "MatMulNBits accuracy level of an int4/int8 export (4: int8 compute)"
    )
    int8_head: bool = _setting(False, Flag(), "keep the output head of an int4 export in int8")
    fused_kernels: bool = _setting(True, Flag(), "fuse attention, rotary embeddings and norms into onnxruntime kernels")

    def __post_init__(self) -> None:
        if self.opset_version is not None:
            check_opset(self.opset_version)
        if self.precision not in PRECISIONS:
            raise ValueError(f"ExportOptions.precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ValueError(f"ExportOptions.block_size must be a power of two from 16, got {self.block_size!r}")
        if not isinstance(self.optimize, bool) and self.optimize != OPTIMIZE_ONNXRUNTIME:
            raise ValueError(
                f"ExportOptions.optimize must be True, False or {OPTIMIZE_ONNXRUNTIME!r}, got {self.optimize!r}"
            )
        unknown = sorted(set(self.verify_tolerances or ()) - set(VERIFY_DTYPES))
        if unknown:
            raise ValueError(
                f"ExportOptions.verify_tolerances: unknown dtypes {unknown}; known: {', '.join(VERIFY_DTYPES)}"
            )

    @property
    def target_opset(self) -> int:
        """The opset the model gets: `opset_version` when given (whatever the registry says), else the
        registry's, else the default (`DEFAULT_OPSET_VERSION`, 20)."""
        if self.opset_version is not None:
            return self.opset_version
        registry_opset = getattr(self.onnx_registry, "opset_version", None)
        return registry_opset if registry_opset is not None else DEFAULT_OPSET_VERSION

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ExportOptions:
        """Options from plain settings (see `SETTINGS`); raises `ValueError` with a one-line reason."""
        return cls.from_parsed(parse_settings(settings))

    @classmethod
    def from_parsed(cls, values: Mapping[str, Any]) -> ExportOptions:
        """Options from settings `parse_settings` returned (not checked again)."""
        values = dict(values)
        verbosity = getattr(logging, values.pop("verbosity", "info").upper())
        diagnostic_options = DiagnosticOptions(verbosity, values.pop("warnings_as_errors", False))
        return cls(diagnostic_options=diagnostic_options, **values)


@dataclasses.dataclass(frozen=True)
class Setting:
    """One plain setting: its name (an option field, a decorator keyword), kind, default and help."""

    name: str
    kind: Kind
    default: Any
    help: str  # what the setting does when true (a --no- flag's help says "do not …")
    flag: str  # the CLI flag
    editor_key: str  # the key in the editor's "onnxlens" configuration and in request options

    def parse(self, value: Any) -> Any:
        """`value` checked by the setting's kind; `SettingError` naming the setting otherwise."""
        try:
            return self.kind.parse(value)
        except SettingError as e:
            raise SettingError(f"export option {self.name!r} {e}") from None


def _settings() -> dict[str, Setting]:
    fields = [*dataclasses.fields(ExportOptions), *dataclasses.fields(DiagnosticOptions)]
    found = {}
    for f in fields:
        if "setting" not in f.metadata:
            continue
        flag = f.metadata.get("flag") or ("--no-" if f.default is True else "--") + f.name.replace("_", "-")
        editor_key = f.metadata.get("editor") or _camel(f.name)
        found[f.name] = Setting(f.name, f.metadata["setting"], f.default, f.metadata["help"], flag, editor_key)
    found["verbosity"] = Setting(
        "verbosity", Choice(VERBOSITIES), "info", "diagnostics detail", "--verbosity", "verbosity"
    )
    return found


def _camel(name: str) -> str:
    return re.sub(r"_(\w)", lambda m: m.group(1).upper(), name)


SETTINGS: dict[str, Setting] = _settings()


def refuse_weight_settings(values: Mapping[str, Any], export: str) -> None:
    """Raise `SettingError` if `values` (plain values or option fields by name) set a weight-precision
    setting (`WEIGHT_SETTINGS`) to other than its default: `export` (a plain export) would not honour it."""
    given = [
        f"{name}={values[name]!r}"
        for name in WEIGHT_SETTINGS
        if values.get(name, SETTINGS[name].default) != SETTINGS[name].default
    ]
    if given:
        raise SettingError(
            f"{export} does not take {', '.join(given)}: the weights' precision is a setting of text-generation "
            "exports (export_for_generation, --task text-generation); a plain export keeps the model's weights "
            "as they are (quantize its ONNX file with onnxruntime.quantization)"
        )


def parse_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Check the names and values of plain settings, once; the parsed values (None means "not set"
    and is dropped). Raises `SettingError` (a `ValueError`) with a one-line reason."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise SettingError(f"unknown export options {unknown}; known: {sorted(SETTINGS)}")
    return {name: SETTINGS[name].parse(value) for name, value in settings.items() if value is not None}
