"""What keeps a cold ``onnxlens-export`` fast (``benchmarks/cold_start.py`` measures it): modules an
export does not need are not imported, and the garbage collector never walks the imported modules'
objects (half a second of a cold run when it does). Each check runs in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COLLECTIONS = """
import atexit, gc, sys
from exporter import cli

frozen_at_start = []  # objects frozen when each collection started
gc.callbacks.append(lambda phase, info: phase == "start" and frozen_at_start.append(gc.get_freeze_count()))
atexit.register(lambda: print(gc.isenabled(), gc.get_freeze_count(), *frozen_at_start))
cli.main([sys.argv[1], "-o", sys.argv[2]])
"""


def _python(code: str, *args: str) -> str:
    """The standard output of `code` run with `args`; it must exit with 0."""
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, check=True, timeout=600
    ).stdout


def test_the_export_pipeline_does_not_import_what_an_export_may_not_need():
    code = "import sys, exporter.api, exporter.cli; print(*sorted(m for m in ('sarif_om', 'transformers', 'onnxruntime') if m in sys.modules))"
    assert _python(code).split() == []


def test_the_cli_collects_garbage_only_after_freezing_the_imported_modules(tmp_path):
    out = _python(COLLECTIONS, os.path.join(REPO, "examples", "mlp.py") + ":mlp", str(tmp_path / "mlp.onnx"))
    summary, exit_handler = out.splitlines()[0], out.splitlines()[-1]  # the handler ran, after the summary
    enabled, frozen, *frozen_at_start = exit_handler.split()
    assert summary == f"exported mlp -> {tmp_path / 'mlp.onnx'}"
    assert enabled == "True"
    assert int(frozen) > 200_000  # torch, onnx, TorchDynamo, torchlib, ...
    assert all(int(count) >= 200_000 for count in frozen_at_start), frozen_at_start  # none walked them
    assert (tmp_path / "mlp.onnx").stat().st_size > 0


@pytest.fixture(scope="module")
def warm_fork_server() -> list[str]:
    """What a fresh interpreter has after the fork server's warm-up: whether the SARIF writer is imported,
    and how many decomposition tables were collected (one interpreter for the tests below)."""
    code = (
        "import sys, onnxlens_server.warm\n"
        "print('sarif_om' in sys.modules)\n"
        "from exporter.passes import decompose\n"
        "print(decompose._all_decompositions.cache_info().currsize)"
    )
    return _python(code).splitlines()[-2:]


def test_the_fork_server_preloads_the_sarif_writer_every_editor_export_uses(warm_fork_server):
    assert warm_fork_server[0] == "True"


def test_the_fork_server_has_decomposed_a_node_before_the_first_export(warm_fork_server):
    """PyTorch's decomposition table is collected (a cached call) and make_fx has traced once."""
    assert warm_fork_server[1] == "1"
