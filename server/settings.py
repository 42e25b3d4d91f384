"""The editor's ``onnxlens`` configuration, and a request's overrides, as export settings.

The export settings' editor keys come from `exporter.options.SETTINGS` (declared once, with the
option fields); the keys below are the server's own. ``outputFolderScope`` is not a setting: the
extension adds it, saying whether the user chose the output folder in their own settings
(``user``) rather than the workspace (`onnxlens_server.outputs`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
from collections.abc import Mapping
from typing import Any

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from exporter.options import SETTINGS, parse_settings
from onnxlens_server.protocol import CONFIGURATION_SECTION, OUTPUT_FOLDER_SCOPE, ErrorCode, RequestError

logger = logging.getLogger(__name__)

TIMEOUT_KEY, OUTPUT_FOLDER_KEY, MEMORY_LIMIT_KEY = "timeoutSeconds", "outputFolder", "memoryLimitMB"
DEFAULT_TIMEOUT = 300.0
DEFAULT_OUTPUT_FOLDER = "onnxlens-out"
_NAMES = {s.editor_key: s.name for s in SETTINGS.values()}  # editor key -> setting name
_SERVER_KEYS = {  # the server's own keys: what a value must be (None: the default)
    TIMEOUT_KEY: (lambda v: type(v) in (int, float) and v > 0, "a positive number of seconds"),
    OUTPUT_FOLDER_KEY: (lambda v: isinstance(v, str), "a string (a folder path)"),
}


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    settings: dict[str, Any]  # the configuration's, parsed by `exporter.options.parse_settings` (once)
    overrides: dict[str, Any]  # the request's (e.g. the op-level debug lens), the same way
    timeout: float
    output_folder: str  # relative to the model's workspace folder (`outputs.output_stem`)
    output_folder_chosen_by_user: bool
    memory_limit_mb: int  # of each export process; 0: none


def export_settings(configuration: Mapping[str, Any], overrides: Mapping[str, Any]) -> ExportSettings:
    """The configuration's export settings and a request's `overrides` (editor keys both), parsed by
    their declarations; an export applies them by `exporter.runner.merge_settings`.
    Raises `RequestError` (INVALID_OPTIONS) for bad values."""
    unknown = sorted(set(overrides) - set(_NAMES))
    if unknown:
        raise RequestError(
            ErrorCode.INVALID_OPTIONS, f"Unknown export option {unknown[0]!r}; known: {', '.join(_NAMES)}"
        )
    try:
        settings = parse_settings({_NAMES[k]: v for k, v in configuration.items() if k in _NAMES})
        overrides = parse_settings({_NAMES[k]: v for k, v in overrides.items()})
    except ValueError as e:
        raise RequestError(ErrorCode.INVALID_OPTIONS, f"Invalid onnxlens settings: {e}") from None
    for key, (valid, expected) in _SERVER_KEYS.items():
        if configuration.get(key) is not None and not valid(configuration[key]):
            raise RequestError(
                ErrorCode.INVALID_OPTIONS,
                f"Invalid onnxlens settings: {key} must be {expected}, got {configuration[key]!r}",
            )
    timeout = float(configuration.get(TIMEOUT_KEY) or DEFAULT_TIMEOUT)
    memory_limit = configuration.get(MEMORY_LIMIT_KEY)
    memory_limit = default_memory_limit_mb() if memory_limit is None else memory_limit
    if not isinstance(memory_limit, int) or isinstance(memory_limit, bool) or memory_limit < 0:
        raise RequestError(
            ErrorCode.INVALID_OPTIONS,
            f"Invalid onnxlens settings: {MEMORY_LIMIT_KEY} must be a whole number of MiB >= 0 (0: no limit), not {memory_limit!r}",
        )
    output_folder = configuration.get(OUTPUT_FOLDER_KEY) or DEFAULT_OUTPUT_FOLDER
    return ExportSettings(
        settings,
        dict(overrides),
        timeout,
        output_folder,
        configuration.get(OUTPUT_FOLDER_SCOPE) == "user",
        memory_limit,
    )


def default_memory_limit_mb() -> int:
    """Half of the machine's memory: a leaking model fails long before the machine swaps."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2 >> 20


async def read_configuration(ls: LanguageServer, scope_uri: str | None) -> dict[str, Any]:
    """The client's ``onnxlens`` configuration for `scope_uri` ({} if it offers none or does not answer)."""
    if not getattr(getattr(ls.client_capabilities, "workspace", None), "configuration", False):
        return {}
    item = types.ConfigurationItem(scope_uri=scope_uri, section=CONFIGURATION_SECTION)
    try:
        (configuration,) = await asyncio.wait_for(
            ls.workspace_configuration_async(types.ConfigurationParams(items=[item])), timeout=5
        )
    except (asyncio.TimeoutError, ValueError):
        logger.warning("The client did not answer workspace/configuration: default settings")
        return {}
    return configuration if isinstance(configuration, dict) else {}
