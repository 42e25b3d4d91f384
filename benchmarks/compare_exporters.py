"""Side-by-side benchmark: onnxlens vs torch.onnx.export (dynamo and TorchScript) on the corpus, plus
larger models (`bench_cases`: HF GPT-2 and SigLIP vision, random weights from configs).

Every exporter exports at the same opset (``--opset``, default onnxlens's default).

For every corpus case and every exporter, a fresh worker process (``--worker CASE EXPORTER``)
builds the case, exports it once to warm up (on a separate model instance), times a second
export, then checks the ONNX model in onnxruntime against eager PyTorch and saves it. One more
worker per case then times all the case's models in onnxruntime (1 thread) interleaved: many short
rounds, each running every model for ~1 ms (at least once) in a random order (`ort_latency.measure`);
each onnxlens variant is compared with the faster of the two torch exporters round by round (median
ratio, its 95 % CI, p25-p75). The parent process only schedules workers (sequentially, so timings do not
compete for cores), collects their JSON lines and prints the table and summary. ``--base TREE`` adds
``onnxlens-base``: onnxlens (and the corpus) of another source tree, e.g. an export of main.

    python benchmarks/compare_exporters.py [--cases mlp,hf_bert] [--exporters onnxlens,torch-dynamo] [--opset 20]
                                           [--base /path/to/main] [--json results.json] [--timeout 600]

See benchmarks/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import ort_latency  # beside this script

ROOT = Path(__file__).resolve().parents[1]
EXPORTERS = ("onnxlens", "onnxlens-ort", "onnxlens-base", "torch-dynamo", "torchscript")
BASELINE = "torch-dynamo"  # export-time ratios are relative to this exporter
OURS = ("onnxlens", "onnxlens-ort", "onnxlens-base")
OTHERS = ("torch-dynamo", "torchscript")  # ORT latency goals are relative to the faster of these
LATENCY_GOAL_MODEL = 1.05  # no model slower than 1.05x the faster other exporter
LATENCY_GOAL_GEOMEAN = 0.9
LOAD_WARNING = 0.2  # cores kept busy by other processes above which timings are flagged
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")

Result = dict[str, Any]


# ======================================================================================
# Worker side (imports torch; runs in a fresh process per (case, exporter) pair)
# ======================================================================================


def _first_line(exc: BaseException) -> str:
    """``Type: first line of the message`` of an exception (terminal colors removed)."""
    lines = [ln.strip() for ln in ANSI_ESCAPE.sub("", str(exc)).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _root_cause(exc: BaseException) -> BaseException:
    """The innermost ``__cause__`` of an exception chain."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return exc


def _worker_setup(tree: Path = ROOT) -> None:
    """Make the project (of `tree`) and its test helpers importable."""
    for path in (tree, tree / "tests"):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


def _as_module(model: Any) -> Any:
    """torch.onnx.export needs an ``nn.Module``: wrap plain callables (onnxlens takes them as is)."""
    import torch

    if isinstance(model, torch.nn.Module):
        return model

    class CallableModule(torch.nn.Module):
        def __init__(self, fn: Callable[..., Any]) -> None:
            super().__init__()
            self.fn = fn

        def forward(self, *args: Any, **kwargs: Any) -> Any:
            return self.fn(*args, **kwargs)

    return CallableModule(model)


def _build_gpt2(batch: int = 1, seq: int = 64) -> tuple[Any, tuple, dict]:
    """GPT-2 (4 layers of width 256, no cache) on a batch of `seq` tokens."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1000, n_positions=128, n_embd=256, n_layer=4, n_head=4, use_cache=False)
    ids = torch.randint(0, 1000, (batch, seq), generator=torch.Generator().manual_seed(0))
    return GPT2LMHeadModel(config).eval(), (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def _build_siglip_vision(batch: int = 1, size: int = 96) -> tuple[Any, tuple, dict]:
    """SigLIP's vision tower (4 layers of width 256, 16-pixel patches) on `size` x `size` images."""
    import torch
    from transformers import SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(0)
    config = SiglipVisionConfig(
        hidden_size=256,
        intermediate_size=1024,
        num_hidden_layers=4,
        num_attention_heads=4,
        image_size=size,
        patch_size=16,
    )
    return SiglipVisionModel(config).eval(), (torch.randn(batch, 3, size, size),), {}


def bench_cases() -> list[Any]:
    """Models measured beside the corpus, larger than its tiny ones (latency only: no second shape)."""
    import corpus

    def bench(name: str, build: Callable[..., Any]) -> Any:
        return corpus.Case(name, build, {}, None, no_second_shape="benchmark only", atol=1e-3, tags=frozenset({"hf"}))

    return [bench("bench_gpt2", _build_gpt2), bench("bench_siglip_vision", _build_siglip_vision)]


def get_case(name: str) -> Any:
    """A corpus case or one of `bench_cases`."""
    import corpus

    return next((c for c in bench_cases() if c.name == name), None) or corpus.get(name)


class ExporterRunner:
    """How one exporter is called (at `opset`), and how its model is fed and compared with eager."""

    name: str

    def __init__(self, opset: int) -> None:
        self.opset = opset

    def prepare(self, case: Any) -> tuple[Any, tuple, dict]:
        """Build the case ready for ``export`` (untimed setup a user would also do)."""
        return case.build()

    def export(self, model: Any, args: tuple, kwargs: dict) -> Any:
        """The export call that is timed; returns an exporter-specific handle."""
        raise NotImplementedError

    def model_proto(self, handle: Any) -> Any:
        """The ``onnx.ModelProto`` of an export handle."""
        raise NotImplementedError

    def onnx_inputs(self, handle: Any, args: tuple, kwargs: dict) -> list[Any]:
        """The model inputs as the flat list the ONNX graph takes."""
        raise NotImplementedError

    def onnx_expected(self, handle: Any, eager_out: Any) -> list[Any]:
        """Eager outputs flattened the way the ONNX graph returns them."""
        raise NotImplementedError


class OnnxlensRunner(ExporterRunner):
    """``exporter.dynamo_export`` with default options; it registers HF pytrees itself."""

    name = "onnxlens"
    optimize: bool | str = True

    def export(self, model: Any, args: tuple, kwargs: dict) -> Any:
        import exporter

        options = exporter.ExportOptions(optimize=self.optimize, opset_version=self.opset)
        return exporter.dynamo_export(model, *args, export_options=options, **kwargs)

    def stage_seconds(self, handle: Any) -> dict[str, float]:
        """Seconds per export stage (capture, passes, ..., onnx passes)."""
        return dict(handle.diagnostic_context.timings)

    def model_proto(self, handle: Any) -> Any:
        return handle.model_proto

    def onnx_inputs(self, handle: Any, args: tuple, kwargs: dict) -> list[Any]:
        return list(handle.adapt_torch_inputs_to_onnx(*args, **kwargs))

    def onnx_expected(self, handle: Any, eager_out: Any) -> list[Any]:
        return list(handle.adapt_torch_outputs_to_onnx(eager_out))


class OnnxlensBaseRunner(OnnxlensRunner):
    """Default onnxlens of the ``--base`` tree (its worker imports that tree's exporter and corpus)."""

    name = "onnxlens-base"


class OnnxlensOrtRunner(OnnxlensRunner):
    """``ExportOptions(optimize="onnxruntime")``: onnxscript's onnxruntime fusions (contrib ops) too."""

    name = "onnxlens-ort"
    optimize = "onnxruntime"


class TorchRunner(ExporterRunner):
    """Shared flattening for torch.onnx.export: tensor leaves, complex as real views."""

    def prepare(self, case: Any) -> tuple[Any, tuple, dict]:
        import corpus

        model, args, kwargs = case.build()
        model = _as_module(model)
        if "hf" in case.tags:
            corpus.register_hf_pytrees(model)
        return model, args, kwargs

    @staticmethod
    def _tensor_leaves(tree: Any) -> list[Any]:
        import torch
        import torch.utils._pytree as pytree

        leaves = [x for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]
        return [torch.view_as_real(x) if x.is_complex() else x for x in leaves]

    def onnx_inputs(self, handle: Any, args: tuple, kwargs: dict) -> list[Any]:
        return self._tensor_leaves((args, kwargs))

    def onnx_expected(self, handle: Any, eager_out: Any) -> list[Any]:
        return self._tensor_leaves(eager_out)


class TorchDynamoRunner(TorchRunner):
    """``torch.onnx.export(..., dynamo=True)`` with its defaults (optimize=True); proto kept in memory."""

    name = "torch-dynamo"

    def export(self, model: Any, args: tuple, kwargs: dict) -> Any:
        import torch

        return torch.onnx.export(model, args, kwargs=kwargs, dynamo=True, opset_version=self.opset)

    def model_proto(self, handle: Any) -> Any:
        return handle.model_proto


class TorchScriptRunner(TorchRunner):
    """The TorchScript exporter ``torch.onnx.export(..., dynamo=False)``, writing to a BytesIO."""

    name = "torchscript"

    def export(self, model: Any, args: tuple, kwargs: dict) -> Any:
        import io

        import torch

        buffer = io.BytesIO()
        torch.onnx.export(model, args, buffer, kwargs=kwargs, dynamo=False, opset_version=self.opset)
        return buffer

    def model_proto(self, handle: Any) -> Any:
        import onnx

        return onnx.load_from_string(handle.getvalue())


RUNNERS: dict[str, Callable[[], ExporterRunner]] = {
    "onnxlens": OnnxlensRunner,
    "onnxlens-ort": OnnxlensOrtRunner,
    "onnxlens-base": OnnxlensBaseRunner,
    "torch-dynamo": TorchDynamoRunner,
    "torchscript": TorchScriptRunner,
}


def count_nodes(model: Any) -> int:
    """Nodes of the main graph after inlining local functions, including subgraphs' nodes."""
    import onnx
    import onnx.inliner

    def count(graph: onnx.GraphProto) -> int:
        total = 0
        for node in graph.node:
            total += 1
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    total += count(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    total += sum(count(g) for g in attr.graphs)
        return total

    return count(onnx.inliner.inline_local_functions(model).graph)


def _opset(model: Any) -> int | None:
    """The default-domain opset a model imports."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def ort_feeds(session: Any, inputs: Sequence[Any]) -> dict[str, Any]:
    """Positional inputs as an onnxruntime feed; the count must match the graph's inputs."""
    from helpers import _to_numpy

    graph_inputs = session.get_inputs()
    if len(inputs) != len(graph_inputs):
        raise ValueError(f"{len(inputs)} flattened inputs vs {len(graph_inputs)} ONNX graph inputs")
    return {i.name: _to_numpy(x) for i, x in zip(graph_inputs, inputs)}


def ort_ops(path: Path) -> dict[str, int]:
    """How many nodes of each op type (``domain.Op`` outside ONNX's domain) onnxruntime's optimizer left."""
    import onnx

    graph = onnx.load(path, load_external_data=False).graph
    return dict(Counter(f"{n.domain}.{n.op_type}" if n.domain else n.op_type for n in graph.node))


def save_model(directory: Path, exporter: str, proto: Any, feeds: dict[str, Any]) -> None:
    """Write a model and its feeds (in graph input order) for the interleaved latency worker."""
    import numpy as np

    (directory / f"{exporter}.onnx").write_bytes(proto.SerializeToString())
    np.savez(directory / f"{exporter}.npz", *feeds.values())


def interleaved_latency_ms(directory: Path) -> dict[str, list[float]]:
    """Each saved model's milliseconds per run in each round of `ort_latency.measure` (all in this process)."""
    import numpy as np

    models = {}
    for path in sorted(directory.glob("*.onnx")):
        session = ort_latency.session(path.read_bytes())
        with np.load(path.with_suffix(".npz")) as data:
            feeds = {i.name: data[f"arr_{n}"] for n, i in enumerate(session.get_inputs())}
        models[path.stem] = (session, feeds)
    return ort_latency.measure(models)


def compare_outputs(actual: Sequence[Any], expected: Sequence[Any], atol: float, rtol: float) -> tuple[float, bool]:
    """Max abs error between ONNX and eager outputs, and whether all are within atol + rtol*|eager|.

    Raises ``ValueError`` when output counts or shapes differ.
    """
    import numpy as np
    from helpers import _to_numpy

    if len(actual) != len(expected):
        raise ValueError(f"{len(actual)} ONNX outputs vs {len(expected)} eager outputs")
    max_err, close = 0.0, True
    for i, (a, e) in enumerate(zip(actual, expected)):
        a = np.asarray(a).astype(np.float64)
        e = np.asarray(_to_numpy(e)).astype(np.float64)
        if a.shape != e.shape:
            raise ValueError(f"output {i}: ONNX shape {a.shape} vs eager {e.shape}")
        if a.size == 0:
            continue
        diff = np.abs(a - e)
        diff = np.where(np.isnan(a) & np.isnan(e), 0.0, diff)  # NaN where eager is NaN is a match
        diff = np.where(np.isnan(diff), np.inf, diff)
        max_err = max(max_err, float(diff.max()))
        close &= bool((diff <= atol + rtol * np.abs(np.nan_to_num(e))).all())
    return max_err, close


def timed_export(runner: ExporterRunner, case: Any) -> tuple[Any, float]:
    """Build the case (untimed) and time just the export call."""
    import gc

    model, args, kwargs = runner.prepare(case)
    gc.collect()
    start = time.perf_counter()
    handle = runner.export(model, args, kwargs)
    return handle, time.perf_counter() - start


def run_pair(case_name: str, exporter_name: str, opset: int, save_dir: Path | None = None) -> Result:
    """Everything measured for one (case, exporter) pair exported at `opset`; failures are recorded,
    not raised. A model that runs is saved to `save_dir` with its feeds."""
    import torch

    case = get_case(case_name)
    runner = RUNNERS[exporter_name](opset)
    result: Result = {
        "case": case_name,
        "exporter": exporter_name,
        "atol": case.atol,
        "rtol": case.rtol,
        "ort_note": case.ort_note,
        "export_ok": False,
        "ort_ok": False,
        "numeric_ok": False,
        "success": False,
        "error": None,
        "failed_stage": None,
    }

    def fail(stage: str, exc: BaseException) -> Result:
        result["failed_stage"] = stage
        result["error"] = _first_line(exc)
        cause = _root_cause(exc)
        if cause is not exc:
            result["root_cause"] = _first_line(cause)
        return result

    try:  # warm-up on its own model instance
        _, result["warmup_export_s"] = timed_export(runner, case)
    except Exception as e:  # noqa: BLE001 - the timed export below reports the failure
        result["warmup_error"] = _first_line(e)
    try:
        handle, result["export_s"] = timed_export(runner, case)
        if isinstance(runner, OnnxlensRunner):
            result["stage_s"] = runner.stage_seconds(handle)
        start = time.perf_counter()
        proto = runner.model_proto(handle)
        result["model_proto_s"] = time.perf_counter() - start
    except Exception as e:  # noqa: BLE001
        return fail("export", e)
    result["export_ok"] = True
    result["opset"] = _opset(proto)
    try:
        result["nodes"] = count_nodes(proto)
    except Exception as e:  # noqa: BLE001 - a count failure does not fail the pair
        result["nodes_error"] = _first_line(e)

    ref_model, ref_args, ref_kwargs = runner.prepare(case)  # fresh state for mutating models
    try:
        with tempfile.TemporaryDirectory() as scratch:
            session = ort_latency.session(proto.SerializeToString(), Path(scratch) / "optimized.onnx")
            result["ort_ops"] = ort_ops(Path(scratch) / "optimized.onnx")
        feeds = ort_feeds(session, runner.onnx_inputs(handle, ref_args, ref_kwargs))
        actual = session.run(None, feeds)
    except Exception as e:  # noqa: BLE001
        return fail("ort", e)
    result["ort_ok"] = True
    if save_dir is not None:
        save_model(save_dir, exporter_name, proto, feeds)

    try:
        with torch.no_grad():
            eager_out = ref_model(*ref_args, **ref_kwargs)
        expected = runner.onnx_expected(handle, eager_out)
        result["max_abs_err"], result["within_atol_rtol"] = compare_outputs(actual, expected, case.atol, case.rtol)
    except Exception as e:  # noqa: BLE001
        return fail("numeric", e)
    result["numeric_ok"] = result["max_abs_err"] <= case.atol
    if not result["numeric_ok"]:
        result["failed_stage"] = "numeric"
        result["error"] = f"max abs err {result['max_abs_err']:.3g} > atol {case.atol:g}"
    result["success"] = result["numeric_ok"]
    return result


def run_repeat(case_name: str, exporter_name: str, repeats: int, opset: int) -> Result:
    """In-process warm export time: one warm-up, then the median of ``repeats`` exports (fresh models)."""
    case = get_case(case_name)
    runner = RUNNERS[exporter_name](opset)
    result: Result = {"case": case_name, "exporter": exporter_name, "repeats": repeats}
    try:
        timed_export(runner, case)
        times = [timed_export(runner, case)[1] for _ in range(repeats)]
    except Exception as e:  # noqa: BLE001
        result["error"] = _first_line(e)
        return result
    result.update(median_s=statistics.median(times), min_s=min(times), times_s=times)
    return result


def worker_main(
    mode: str, argv: list[str], repeats: int, opset: int = 0, tree: Path = ROOT, save_dir: Path | None = None
) -> None:
    """Run one worker job; its stdout's last line is the JSON result (exporter chatter goes to stderr)."""
    import contextlib

    _worker_setup(tree)
    with contextlib.redirect_stdout(sys.stderr):
        if mode == "list":
            import corpus

            payload: Any = [c.name for c in corpus.CASES + bench_cases()]
        elif mode == "pair":
            payload = run_pair(*argv, opset, save_dir=save_dir)
        elif mode == "latency":
            payload = interleaved_latency_ms(Path(argv[0]))
        else:
            payload = run_repeat(*argv, repeats, opset)
    print(json.dumps(payload), flush=True)


# ======================================================================================
# Parent side (no torch import: schedules workers sequentially and reports)
# ======================================================================================


def _busy_cpu_seconds() -> float | None:
    """CPU seconds all processes of the machine spent busy so far (Linux ``/proc/stat``)."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu_seconds() -> float:
    times = os.times()
    return times.children_user + times.children_system


def call_worker(worker_args: list[str], timeout: float) -> tuple[Any, str | None, float]:
    """Run this script as a worker; returns (parsed JSON or None, error, wall seconds)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), *worker_args]
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None, f"worker timed out after {timeout:g} s", time.perf_counter() - start
    wall = time.perf_counter() - start
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    try:
        return json.loads(lines[-1]), None, wall
    except (IndexError, json.JSONDecodeError):
        tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or [""]
        return None, f"worker crashed (rc={proc.returncode}): {tail[0][:200]}", wall


def run_pair_in_worker(
    case: str, exporter: str, opset: int, timeout: float, save_dir: Path, base: Path | None = None
) -> Result:
    """One (case, exporter) pair in a fresh process (`onnxlens-base` importing the `base` tree); a crash
    or timeout is a failed export. The model is saved to `save_dir` for the interleaved latency.

    Also records ``other_load``: the CPU cores that *other* processes kept busy meanwhile
    (machine-wide busy time minus the worker's own), a warning sign for the timings.
    """
    busy, own = _busy_cpu_seconds(), _children_cpu_seconds()
    tree = ["--tree", str(base)] if exporter == "onnxlens-base" and base else []
    worker = ["--worker", case, exporter, "--opset", str(opset), "--save-dir", str(save_dir), *tree]
    payload, error, wall = call_worker(worker, timeout)
    busy_after = _busy_cpu_seconds()
    other = None if busy is None or busy_after is None else (busy_after - busy) - (_children_cpu_seconds() - own)
    if payload is None:
        payload = {
            "case": case, "exporter": exporter, "export_ok": False, "ort_ok": False,
            "numeric_ok": False, "success": False, "failed_stage": "worker", "error": error,
        }  # fmt: skip
    payload["worker_wall_s"] = wall
    payload["other_load"] = None if other is None else max(0.0, other / wall)
    return payload


def measure_interleaved(case_results: list[Result], save_dir: Path, timeout: float) -> None:
    """Time the case's saved models interleaved in one worker: each result gets ``ort_round_ms`` (ms per
    run in each round), ``ort_ms`` (their median) and ``ort_p25_ms``, or ``latency_error``."""
    latencies, error, _ = call_worker(["--worker-latency", str(save_dir)], timeout)
    for r in case_results:
        rounds = (latencies or {}).get(r["exporter"])
        if rounds:
            r["ort_round_ms"], r["ort_ms"] = rounds, statistics.median(rounds)
            r["ort_p25_ms"] = ort_latency.percentile(rounds, 25)
        elif r["ort_ok"]:
            r["latency_error"] = error or "not measured"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def status(r: Result) -> str:
    """``ok`` or which stage failed."""
    return "ok" if r["success"] else f"FAIL({r.get('failed_stage') or '?'})"


def describe_error(r: Result) -> str:
    """The recorded error, with its root cause when that differs (empty if none)."""
    text = r.get("error") or ""
    if r.get("root_cause"):
        text += f" (cause: {r['root_cause']})"
    return text


def export_ratio(r: Result, by_key: dict[tuple[str, str], Result]) -> float | None:
    """This row's export time over the baseline exporter's for the same case (both exported)."""
    base = by_key.get((r["case"], BASELINE))
    if not (r["export_ok"] and base and base["export_ok"]):
        return None
    return r["export_s"] / base["export_s"]


def print_table(results: list[Result]) -> None:
    """One row per (case, exporter)."""
    by_key = {(r["case"], r["exporter"]): r for r in results}
    header = (
        "case",
        "exporter",
        "success",
        "opset",
        "export s",
        f"/ {BASELINE}",
        "max abs err",
        "nodes",
        "ORT ms",
        "p25",
    )
    rows = [
        (
            r["case"],
            r["exporter"],
            status(r),
            str(r.get("opset", "-")),
            _fmt(r.get("export_s"), ".3f"),
            _fmt(export_ratio(r, by_key), ".2f"),
            _fmt(r.get("max_abs_err"), ".2e"),
            str(r.get("nodes", "-")),
            _fmt(r.get("ort_ms"), ".4f"),
            _fmt(r.get("ort_p25_ms"), ".4f"),
        )
        for r in results
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: " | ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    print(line(header))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def paired(results: list[Result], a: str, b: str, key: str) -> dict[str, float]:
    """Per case ``a[key] / b[key]`` over the cases both exporters fully succeed on."""
    by_key = {(r["case"], r["exporter"]): r for r in results}
    ratios = {}
    for (case, exporter), ra in by_key.items():
        rb = by_key.get((case, b))
        if exporter == a and rb and ra["success"] and rb["success"] and rb[key] > 0:
            ratios[case] = ra[key] / rb[key]
    return ratios


def latency_ratio(by_key: dict[tuple[str, str], Result], case: str, ours: str, other: str) -> dict[str, Any] | None:
    """``ours`` over ``other`` round by round (`ort_latency.ratio_summary`), if both succeed and were timed."""
    a, b = by_key.get((case, ours)), by_key.get((case, other))
    if not (a and b and a["success"] and b["success"] and a.get("ort_round_ms") and b.get("ort_round_ms")):
        return None
    return ort_latency.ratio_summary(a["ort_round_ms"], b["ort_round_ms"])


def print_summary(results: list[Result], cases: list[str], exporters: list[str]) -> None:
    """Success counts, onnxlens regressions vs torch-dynamo, and the headline ratios."""
    print(f"\nSummary over {len(cases)} cases")
    by_key = {(r["case"], r["exporter"]): r for r in results}
    for exporter in exporters:
        rows = [by_key[(c, exporter)] for c in cases]
        failed = [f"{r['case']} ({status(r)})" for r in rows if not r["success"]]
        print(
            f"  {exporter:<13} succeeds on {len(rows) - len(failed)}/{len(rows)}; fails: {', '.join(failed) or 'none'}"
        )
    if {"onnxlens", BASELINE} <= set(exporters):
        lens_fail = [c for c in cases if by_key[(c, BASELINE)]["success"] and not by_key[(c, "onnxlens")]["success"]]
        print(f"  {BASELINE} succeeds but onnxlens fails: {len(lens_fail)}")
        for c in lens_fail:
            r = by_key[(c, "onnxlens")]
            print(f"    - {c}: [{r.get('failed_stage')}] {describe_error(r)}")
        lens_only = [c for c in cases if by_key[(c, "onnxlens")]["success"] and not by_key[(c, BASELINE)]["success"]]
        print(f"  onnxlens succeeds but {BASELINE} fails: {len(lens_only)}: {', '.join(lens_only) or 'none'}")
        ratios = paired(results, "onnxlens", BASELINE, "export_s")
        if ratios:
            print(f"  export time onnxlens / {BASELINE}: median {statistics.median(ratios.values()):.2f} "
                  f"(min {min(ratios.values()):.2f}, max {max(ratios.values()):.2f}) over {len(ratios)} cases both succeed")  # fmt: skip
    loads = [r["other_load"] for r in results if r.get("other_load") is not None]
    if loads:
        busy = max(loads) > LOAD_WARNING
        print(f"  other processes' CPU load during the workers: median {statistics.median(loads):.2f}, "
              f"max {max(loads):.2f} cores{'  << WARNING: machine not idle, timings are unreliable' if busy else ''}")  # fmt: skip
    for other in ("torchscript", BASELINE):
        if {"onnxlens", other} <= set(exporters):
            ratios = [latency_ratio(by_key, c, "onnxlens", other) for c in cases]
            gm = geomean([r["median"] for r in ratios if r])
            print(f"  ORT latency onnxlens / {other}: geometric mean {_fmt(gm, '.3f')} of the per-case median "
                  f"per-round ratios over {sum(1 for r in ratios if r)} cases both succeed")  # fmt: skip


def best_other(by_key: dict[tuple[str, str], Result], case: str) -> str | None:
    """The other exporter with the lowest median ORT latency among those that succeed on `case`."""
    timed = [(by_key[(case, o)]["ort_ms"], o) for o in OTHERS if by_key.get((case, o), {}).get("success")]
    timed = [(ms, o) for ms, o in timed if ms is not None]
    return min(timed)[1] if timed else None


def add_latency_vs_best_other(results: list[Result]) -> None:
    """Give each onnxlens variant's result ``ort_vs_best_other``: its round-by-round ratio to the other
    exporter of lowest median latency (`latency_ratio`, plus ``other``)."""
    by_key = {(r["case"], r["exporter"]): r for r in results}
    for r in results:
        other = best_other(by_key, r["case"]) if r["exporter"] in OURS else None
        summary = other and latency_ratio(by_key, r["case"], r["exporter"], other)
        if summary:
            r["ort_vs_best_other"] = {
                **summary,
                "other": other,
                "verdict": ort_latency.verdict(summary, LATENCY_GOAL_MODEL),
            }


def _ratio_cell(summary: dict[str, Any] | None) -> str:
    """``median [95 % CI] p25-p75`` of a round-by-round ratio, marked ``!`` over the goal, ``?`` unsure."""
    if summary is None:
        return "-"
    mark = {"over": "!", "unsure": "?", "ok": " "}[summary["verdict"]]
    low, high = summary["ci95"]
    return f"{summary['median']:.3f}{mark} [{low:.3f}-{high:.3f}] {summary['p25']:.2f}-{summary['p75']:.2f}"


def print_latency_goals(results: list[Result], exporters: list[str]) -> None:
    """ORT latency of each onnxlens variant over the faster other exporter, per case (median of the
    per-round ratios, its 95 % CI, the ratios' p25-p75) and as a geomean of the medians, against the
    goals: no case above LATENCY_GOAL_MODEL (``!`` when the whole CI is above it, ``?`` when the CI
    straddles it), geomean <= LATENCY_GOAL_GEOMEAN. ``=`` marks a case where onnxruntime's optimizer
    leaves the same ops of each type in ours as in another exporter's model, whatever each exporter wrote."""
    ours = [e for e in OURS if e in exporters]
    if not ours or not set(OTHERS) & set(exporters):
        return
    by_key = {(r["case"], r["exporter"]): r for r in results}
    summaries = {e: {r["case"]: r["ort_vs_best_other"] for r in results if r["exporter"] == e and r.get("ort_vs_best_other")} for e in ours}  # fmt: skip
    cases = sorted(set().union(*summaries.values()))
    rounds = [s["rounds"] for e in ours for s in summaries[e].values()]
    print(
        f"\nORT latency / the faster of {' and '.join(o for o in OTHERS if o in exporters)}, round by round "
        f"({_fmt(min(rounds, default=None), 'd')}-{_fmt(max(rounds, default=None), 'd')} rounds): median ratio, "
        f"[95 % CI of the median], p25-p75 of the ratios (goal: each <= {LATENCY_GOAL_MODEL}, geomean <= {LATENCY_GOAL_GEOMEAN})"
    )
    print(f"  {'case':<26} {'best other (median, p25)':<38} " + " ".join(f"{e:<38}" for e in ours))
    for case in cases:
        other = best_other(by_key, case)
        r = by_key[(case, other)]
        best = f"{r['ort_ms'] * 1e3:.1f} us, {r['ort_p25_ms'] * 1e3:.1f} us ({other})"
        cells = " ".join(
            f"{_ratio_cell(summaries[e].get(case)) + ('=' if _same_ort_ops(by_key, case, e) else ''):<38}" for e in ours
        )
        print(f"  {case:<26} {best:<38} {cells}")
    for e in ours:
        values = summaries[e]
        over = sorted(c for c, v in values.items() if v["verdict"] == "over")
        unsure = sorted(c for c, v in values.items() if v["verdict"] == "unsure")
        same = [c for c in values if _same_ort_ops(by_key, c, e)]
        gm = geomean([v["median"] for v in values.values()])
        print(
            f"  {e}: geomean {_fmt(gm, '.3f')} over {len(values)} cases; above {LATENCY_GOAL_MODEL}: {len(over)} "
            f"({', '.join(over) or 'none'}); CI straddles it: {len(unsure)} ({', '.join(unsure) or 'none'}); "
            f"the same ops in onnxruntime as another exporter's: {len(same)} ({', '.join(sorted(same)) or 'none'})"
        )


def _same_ort_ops(by_key: dict[tuple[str, str], Result], case: str, ours: str) -> bool:
    """Whether onnxruntime's optimizer left the same ops of each type in ours as in another exporter's model."""
    mine = by_key.get((case, ours), {}).get("ort_ops")
    return mine is not None and any(by_key.get((case, o), {}).get("ort_ops") == mine for o in OTHERS)


def print_stage_medians(results: list[Result]) -> None:
    """Median seconds of each export stage of the onnxlens variants over the cases they export."""
    for exporter in OURS:
        stages = [r["stage_s"] for r in results if r["exporter"] == exporter and r.get("stage_s")]
        if not stages:
            continue
        names = list(dict.fromkeys(name for s in stages for name in s))
        medians = ", ".join(f"{name} {statistics.median(s.get(name, 0.0) for s in stages) * 1e3:.1f}" for name in names)
        print(f"  {exporter} stage medians (ms) over {len(stages)} cases: {medians}")


def print_repeat_figure(case: str, exporters: list[str], repeats: int, opset: int, timeout: float) -> list[Result]:
    """The in-process warm export time of one case (one worker per exporter)."""
    print(f"\nIn-process warm export time of '{case}' (1 warm-up, then median of {repeats} exports):")
    figures = []
    for exporter in exporters:
        worker = ["--worker-repeat", case, exporter, "--repeats", str(repeats), "--opset", str(opset)]
        payload, error, _ = call_worker(worker, timeout)
        payload = payload or {"case": case, "exporter": exporter, "error": error}
        figures.append(payload)
        if payload.get("error"):
            print(f"  {exporter:<13} FAILED: {payload['error']}")
        else:
            print(f"  {exporter:<13} median {payload['median_s'] * 1e3:.1f} ms (min {payload['min_s'] * 1e3:.1f} ms)")
    return figures


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=_csv, help="comma-separated corpus case names (default: all)")
    parser.add_argument(
        "--exporters", type=_csv, default=list(EXPORTERS), help=f"comma-separated subset of {','.join(EXPORTERS)}"
    )
    parser.add_argument("--json", metavar="OUT", type=Path, help="write all raw results to this JSON file")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per worker (default 600)")
    _worker_setup()
    from exporter.constants import DEFAULT_OPSET_VERSION  # a leaf module: the parent stays torch-free

    parser.add_argument(
        "--opset",
        type=int,
        default=DEFAULT_OPSET_VERSION,
        help=f"every exporter's opset (default {DEFAULT_OPSET_VERSION})",
    )
    parser.add_argument("--repeat-case", default="mlp", help="case of the in-process warm export figure (default mlp)")
    parser.add_argument("--repeats", type=int, default=10, help="exports in that figure; 0 skips it (default 10)")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "EXPORTER"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-repeat", nargs=2, metavar=("CASE", "EXPORTER"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--base", type=Path, help="source tree whose onnxlens runs as onnxlens-base (e.g. an export of main)"
    )
    parser.add_argument("--worker-list", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-latency", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--save-dir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, default=ROOT, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = set(args.exporters) - set(EXPORTERS)
    if unknown:
        parser.error(f"unknown exporters {sorted(unknown)}; choose from {', '.join(EXPORTERS)}")
    if args.base is None:
        args.exporters = [e for e in args.exporters if e != "onnxlens-base"]
    elif not (args.base / "exporter").is_dir():
        parser.error(f"--base {args.base}: not a source tree of onnxlens (no exporter/)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker_list:
        worker_main("list", [], 0)
        return 0
    if args.worker_latency:
        worker_main("latency", [args.worker_latency], 0)
        return 0
    if args.worker or args.worker_repeat:
        mode = "pair" if args.worker else "repeat"
        worker_main(mode, args.worker or args.worker_repeat, args.repeats, args.opset, args.tree, args.save_dir)
        return 0

    all_cases, error, _ = call_worker(["--worker-list"], args.timeout)
    if all_cases is None:
        sys.exit(f"could not list the corpus: {error}")
    cases = args.cases or all_cases
    missing = [c for c in cases if c not in all_cases]
    if missing:
        sys.exit(f"unknown cases: {', '.join(missing)}")
    exporters = [e for e in EXPORTERS if e in args.exporters]

    results = []
    for i, case in enumerate(cases, 1):
        with tempfile.TemporaryDirectory(prefix="compare_exporters_") as save_dir:
            case_results = []
            for exporter in exporters:
                r = run_pair_in_worker(case, exporter, args.opset, args.timeout, Path(save_dir), args.base)
                case_results.append(r)
                print(f"[{i}/{len(cases)}] {case} / {exporter}: {status(r)} ({r['worker_wall_s']:.1f} s)  {describe_error(r)}",
                      file=sys.stderr, flush=True)  # fmt: skip
            measure_interleaved(case_results, Path(save_dir), args.timeout)
        results += case_results

    add_latency_vs_best_other(results)
    print_table(results)
    print_summary(results, cases, exporters)
    print_stage_medians(results)
    print_latency_goals(results, exporters)
    figures = []
    if args.repeats > 0:
        timed = [e for e in exporters if e not in ("torchscript", "onnxlens-base")]
        figures = print_repeat_figure(args.repeat_case, timed, args.repeats, args.opset, args.timeout)
    env = environment()
    print("\nEnvironment: " + ", ".join(f"{k} {v}" for k, v in env.items()))
    if args.json:
        args.json.write_text(json.dumps({"results": results, "repeat_figure": figures, "environment": env}, indent=1))
    return 0


def environment() -> dict[str, str]:
    """Versions of the tools measured (imported in a subprocess: the parent stays torch-free)."""
    code = (
        "import json, platform, torch, onnx, onnxruntime, onnxscript\n"
        "try:\n import transformers; tv = transformers.__version__\nexcept ImportError:\n tv = None\n"
        "print(json.dumps({'python': platform.python_version(), 'torch': torch.__version__, 'onnx': onnx.__version__,"
        " 'onnxruntime': onnxruntime.__version__, 'onnxscript': onnxscript.__version__, 'transformers': tv,"
        " 'machine': platform.platform()}))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"error": proc.stderr.strip()[-200:]}


if __name__ == "__main__":
    sys.exit(main())
