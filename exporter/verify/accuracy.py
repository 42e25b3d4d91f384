"""Accuracy in the real runtime (FXE0021): the final ONNX model in onnxruntime against eager PyTorch.

`Verifier.verify` runs the model exactly as `ExportOutput.save` writes it (after optimization) on
the given inputs and compares every output (max abs/rel error and an error histogram per output,
in the result's properties). When an output diverges, `exporter.verify.divergence` bisects to the first
diverging FX node (one more onnxruntime session, one run of the FX graph): that is the one error,
at its innermost user source line; the unoptimized model is run to say whether the optimizer is at
fault, and a reproducer is kept for `ExportOutput.save` to write beside the model.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import time
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from exporter.capture.adapters import InputAdapter, OutputAdapter
from exporter.constants import SOURCE_LINE, Prop, ir_version
from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.diagnostics.context import Diagnostic, io_properties
from exporter.diagnostics.locations import stack_of
from exporter.verify import divergence, fast_paths, int8_kernels, numerics, ort_session, seeded
from exporter.verify.reproducer import Reproducer, directory_for


@dataclasses.dataclass
class Verification:
    """The outcome of one verification."""

    ok: bool
    outputs: list[numerics.Comparison]
    bisection: divergence.Bisection | None = None
    unoptimized_matches: bool | None = None  # None: not run (no unoptimized model kept, or nothing diverged)
    ort_sessions: int = 0
    ort_runs: int = 0
    seconds: float = 0.0
    reproducer: Reproducer | None = None
    diagnostic: Diagnostic | None = None  # the error result (None when the outputs match)
    skipped: str | None = None  # why nothing was compared (onnxruntime does not run the model)


class Verifier:
    """Verifies an export on its example inputs or on any other inputs of the same structure."""

    def __init__(
        self,
        program: torch.export.ExportedProgram,
        torch_model: Any,
        model: ir.Model,
        unoptimized: ir.Model | None,
        input_adapter: InputAdapter,
        output_adapter: OutputAdapter,
        *,
        opset_version: int,
        tolerances: dict[str, tuple[float, float]] | None = None,
        budget_bytes: int = divergence.DEFAULT_BUDGET_BYTES,
    ) -> None:
        self.program, self.torch_model, self.model = program, torch_model, model
        self._unoptimized = unoptimized  # the translated model before the ONNX passes (finalized on first use)
        self._unoptimized_final = False
        self.input_adapter, self.output_adapter = input_adapter, output_adapter
        self.opset_version = opset_version
        self.tolerances = numerics.tolerances(tolerances)
        self.budget_bytes = budget_bytes
        self.last: Verification | None = None

    def verify(self, args: tuple[Any, ...], kwargs: dict[str, Any], ctx: DiagnosticContext) -> Verification:
        """Compare the model with eager PyTorch on `args`/`kwargs`, reporting FXE0021 to `ctx`."""
        start = time.perf_counter()
        expected = [
            numerics.to_numpy(x) for x in self.output_adapter.apply(numerics.eager(self.torch_model, args, kwargs))
        ]
        self._nested_tensors(expected, args, kwargs, ctx)
        inputs = [numerics.to_numpy(x) for x in self.input_adapter.apply(*args, **kwargs)]
        try:
            feeds, actual = _run(self.model, inputs)
        except Exception as e:
            reason = f"{type(e).__name__}: {_first_line(e).rstrip('.')}"
            if type(e).__name__ == "NotImplemented":  # no kernel for a type it uses (bf16 on the CPU provider)
                reason = f"onnxruntime does not run this model ({reason})"
                ctx.report(rules.ACCURACY_DIVERGENCE, Level.NOTE, f"Verification skipped: {reason}.")
                return Verification(ok=True, outputs=[], skipped=reason)
            message = f"onnxruntime cannot run the exported model: {reason}."  # a graph it rejects: not a model
            return Verification(
                ok=False, outputs=[], diagnostic=ctx.report(rules.ACCURACY_DIVERGENCE, Level.ERROR, message)
            )
        if len(actual) != len(expected):
            message = f"The ONNX model has {len(actual)} outputs where eager PyTorch gives {len(expected)}."
            return Verification(
                ok=False,
                outputs=[],
                ort_sessions=1,
                ort_runs=1,
                diagnostic=ctx.report(rules.ACCURACY_DIVERGENCE, Level.ERROR, message),
            )
        outputs = numerics.compare_outputs(actual, expected, self.tolerances, histogram=True)
        del actual
        drawn = seeded.random_outputs(self.program, [v.name for v in self.model.graph.outputs])
        compared = [c for i, c in enumerate(outputs) if i not in drawn]
        result = Verification(ok=all(c.ok for c in compared), outputs=outputs, ort_sessions=1, ort_runs=1)
        if result.ok:
            result.seconds = time.perf_counter() - start
            matches = f"{len(compared)} output{' matches' if len(compared) == 1 else 's match'}"
            message = f"Verified in onnxruntime against eager PyTorch: {matches} ({_outputs_summary(compared)})."
            timing = {"ortSessions": 1, "ortRuns": 1, "seconds": round(result.seconds, 3)}
            if drawn:  # not a verified model: some outputs could not be compared
                ctx.report(
                    rules.ACCURACY_DIVERGENCE,
                    Level.WARNING,
                    _not_compared(drawn, matches if compared else ""),
                    node=next(iter(drawn.values())),
                    outputs=[c.properties() for c in compared],
                    randomOutputs=sorted(drawn),
                    **timing,
                )
            else:
                ctx.report(
                    rules.ACCURACY_DIVERGENCE, Level.NOTE, message, outputs=[c.properties() for c in outputs], **timing
                )
            self.last = result
            return result
        self._locate(result, feeds, expected, args, kwargs, ctx, start, set(drawn))
        self.last = result
        return result

    def _nested_tensors(self, expected: list[np.ndarray], args, kwargs, ctx: DiagnosticContext) -> None:
        """A warning where eager PyTorch's fast path, nested tensors in an nn.TransformerEncoder, gives other
        outputs than its regular path, the one the graph computes and `expected` holds (0 at padded positions)."""
        encoders = fast_paths.nested_tensor_encoders(self.torch_model)
        if not encoders:
            return
        fast = self.output_adapter.apply(numerics.eager(self.torch_model, args, kwargs, fast_paths=True))
        compared = numerics.compare_outputs([numerics.to_numpy(x) for x in fast], expected, self.tolerances)
        differing = "; ".join(f"output {i}: {c.describe()}" for i, c in enumerate(compared) if not c.ok)
        if not differing:
            return
        name = f" {encoders[0]!r}" if encoders[0] else ""
        ctx.report(
            rules.ACCURACY_DIVERGENCE,
            Level.WARNING,
            f"Eager PyTorch runs nn.TransformerEncoder{name} on nested tensors in inference (enable_nested_tensor=True, "
            "given a src_key_padding_mask): they leave 0 at the padded positions, which the exported graph computes "
            f"as the encoder's regular path does ({differing}). Verified against that path; for eager PyTorch to give "
            "the same, construct the encoder with enable_nested_tensor=False, or ignore the padded positions.",
            node=fast_paths.module_node(self.program, encoders[0]),
            nestedTensorEncoders=encoders,
        )

    def _locate(
        self, result: Verification, feeds, expected, args, kwargs, ctx: DiagnosticContext, start: float, drawn: set[int]
    ) -> None:
        """Bisect to the first divergence, check the unoptimized model, report the one error (outputs that
        depend on random numbers, `drawn`, are not compared)."""
        diverging = [i for i, c in enumerate(result.outputs) if not c.ok and i not in drawn]
        outputs_text = "; ".join(f"output {i}: {result.outputs[i].describe()}" for i in diverging)
        properties: dict[str, Any] = {
            "outputs": [c.properties() for c in result.outputs],
            "divergingOutputs": diverging,
        }
        try:
            result.bisection = divergence.bisect(
                self.program, self.model, feeds, args, kwargs, self.tolerances, budget_bytes=self.budget_bytes
            )
            result.ort_sessions += 1
            result.ort_runs += result.bisection.ort_runs
        except Exception as e:
            properties["bisectionError"] = f"{type(e).__name__}: {_first_line(e)}"
        if result.bisection and self._only_ties(result, diverging, drawn, ctx, start):
            return
        int8_kernels_differ = self._without_qdq_fusion(result, feeds, expected, drawn, properties)
        if int8_kernels_differ and not int8_kernels.may_saturate(self.model):
            self._int8_rounding(result, diverging, ctx, start, properties)
            return
        unoptimized = self._unoptimized_model() if not int8_kernels_differ else None
        if unoptimized is not None:
            try:
                _, actual = _run(unoptimized, inputs=list(feeds.values()))
                result.ort_sessions += 1
                result.ort_runs += 1
                result.unoptimized_matches = all(
                    c.ok
                    for i, c in enumerate(numerics.compare_outputs(actual, expected, self.tolerances))
                    if i not in drawn
                )
            except Exception as e:
                properties["unoptimizedError"] = f"{type(e).__name__}: {_first_line(e)}"
        optimizer = (
            int8_kernels.SATURATION
            if int8_kernels_differ
            else {
                True: " The unoptimized model matches eager PyTorch: the divergence comes from the ONNX optimizer.",
                False: " The unoptimized model diverges as well (not the optimizer).",
                None: "",
            }[result.unoptimized_matches]
        )
        properties["unoptimizedModelMatches"] = result.unoptimized_matches
        result.seconds = time.perf_counter() - start
        properties.update(ortSessions=result.ort_sessions, ortRuns=result.ort_runs, seconds=round(result.seconds, 3))
        found = result.bisection.divergence if result.bisection else None
        if result.bisection:
            properties.update(
                nodesCompared=result.bisection.compared, mappedFraction=round(result.bisection.mapped_fraction, 3)
            )
            _report_per_line(ctx, result.bisection)
        if found is None:
            where = " No intermediate value diverges: the outputs do." if result.bisection else ""
            result.diagnostic = ctx.report(
                rules.ACCURACY_DIVERGENCE,
                Level.ERROR,
                f"The ONNX model gives other numbers than eager PyTorch in onnxruntime: {outputs_text}.{where}{optimizer}",
                **properties,
            )
            return
        ctx.report(
            rules.ACCURACY_DIVERGENCE,
            Level.NOTE,
            f"Verification in onnxruntime against eager PyTorch failed: {outputs_text} (first divergence: {found.node.name}).",
            **properties,
        )
        ops = "/".join(dict.fromkeys(found.onnx_op_types)) or "no ONNX ops of its own"
        c = found.comparison
        result.reproducer = Reproducer(
            f"onnxlens reproducer: {found.node.target} ({found.node.name}) → {ops} diverges from PyTorch in onnxruntime.",
            found.repro_graph,
            ir_version(self.opset_version),
            found.repro_inputs,
            {found.repro_graph.outputs[0].name: found.expected},
            c.atol,
            c.rtol,
        )
        isolated = self._isolated(result.reproducer, found)
        result.ort_sessions += 1
        result.ort_runs += 1
        properties.update(isolatedNodeDiverges=isolated, ortSessions=result.ort_sessions, ortRuns=result.ort_runs)
        amplifies = (
            " On PyTorch's exact input values its ONNX ops match: it amplifies differences of its inputs that are "
            "within tolerance (the per-line notes show them), and the reproducer passes."
            if isolated is False and not int8_kernels_differ
            else ""
        )
        message = (
            f"First divergence from eager PyTorch in onnxruntime: {found.node.target} ({found.node.name}) → {ops}: "
            f"{c.describe()}, while its inputs match. "
            + (
                f"{found.inherited} later value{' inherits' if found.inherited == 1 else 's inherit'} it; "
                if found.inherited
                else ""
            )
            + f"{outputs_text}.{optimizer}{amplifies}"
        )
        result.diagnostic = ctx.report(
            rules.ACCURACY_DIVERGENCE,
            Level.ERROR,
            message,
            node=found.node,
            onnxOpTypes=found.onnx_op_types,
            **{f"node{k[0].upper()}{k[1:]}": v for k, v in c.properties().items()},
            inheritedDivergences=found.inherited,
            otherFirstDivergences=found.independent,
            **properties,
        )

    def _without_qdq_fusion(self, result: Verification, feeds, expected, drawn: set[int], properties) -> bool:
        """Whether a quantized model that diverges matches with onnxruntime's QDQ fusion off: its int8 kernels,
        not the export, make the difference (`exporter.verify.int8_kernels`)."""
        if not int8_kernels.has_qdq(self.model):
            return False
        try:
            _, actual = _run(self.model, list(feeds.values()), int8_kernels.QDQ_FUSION_OFF)
        except Exception as e:
            properties["qdqFusionOffError"] = f"{type(e).__name__}: {_first_line(e)}"
            return False
        result.ort_sessions += 1
        result.ort_runs += 1
        compared = numerics.compare_outputs(actual, expected, self.tolerances)
        properties["qdqFusionOffMatches"] = all(c.ok for i, c in enumerate(compared) if i not in drawn)
        return properties["qdqFusionOffMatches"]

    def _int8_rounding(
        self, result: Verification, diverging: list[int], ctx: DiagnosticContext, start: float, properties
    ) -> None:
        """A quantized model that matches with the QDQ fusion off, and whose int8 kernels cannot saturate: verified
        (its ops compute what PyTorch does), with a warning at the first divergence giving what the kernels change."""
        result.ok, result.seconds = True, time.perf_counter() - start
        found = result.bisection.divergence if result.bisection else None
        outputs_text = "; ".join(f"output {i}: {result.outputs[i].describe()}" for i in diverging)
        first = f" (first divergence: {found.node.target} ({found.node.name}))" if found else ""
        properties.update(ortSessions=result.ort_sessions, ortRuns=result.ort_runs, seconds=round(result.seconds, 3))
        ctx.report(
            rules.ACCURACY_DIVERGENCE,
            Level.WARNING,
            "Verified in onnxruntime against eager PyTorch with its QDQ fusion off (session config "
            f"`session.disable_quant_qdq`). With it on, as by default, {outputs_text}{first}: the int8 kernels "
            "onnxruntime fuses the QuantizeLinear/DequantizeLinear pairs into round their results in other places "
            "(a quantized value may move by a step).",
            node=found.node if found else None,
            **properties,
        )

    def _only_ties(
        self, result: Verification, diverging: list[int], drawn: set[int], ctx: DiagnosticContext, start: float
    ) -> bool:
        """When every diverging output is indices that pick other elements of equal values (`ties`) and nothing
        else diverges: a verified export but for that order, which PyTorch does not define (a warning at the op)."""
        names = [v.name for v in self.model.graph.outputs]
        ops = {i: result.bisection.ties.get(names[i]) for i in diverging}
        if result.bisection.divergence is not None or None in ops.values():
            return False
        result.ok, result.seconds = True, time.perf_counter() - start
        compared = [c for i, c in enumerate(result.outputs) if i not in drawn and i not in ops]
        which = ", ".join(f"output {i} ({ops[i].target})" for i in ops)
        ctx.report(
            rules.ACCURACY_DIVERGENCE,
            Level.WARNING,
            f"Verified in onnxruntime against eager PyTorch but for the order of equal values: {which} "
            f"{'picks' if len(ops) == 1 else 'pick'} other elements of the same values than PyTorch, which does not "
            "define which of equal values comes first"
            + (
                f"; the other {len(compared)} output{'s match' if len(compared) != 1 else ' matches'}."
                if compared
                else "."
            ),
            node=next(iter(ops.values())),
            outputs=[c.properties() for c in compared],
            tiedOutputs=sorted(ops),
            ortSessions=result.ort_sessions,
            ortRuns=result.ort_runs,
            seconds=round(result.seconds, 3),
        )
        return True

    def _isolated(self, reproducer: Reproducer, found: divergence.Divergence) -> bool | None:
        """Whether the node's ONNX ops alone, on PyTorch's exact inputs, diverge (None: they did not run)."""
        try:
            [actual] = reproducer.run()
        except Exception:
            return None
        return not numerics.compare(actual, found.expected, numerics.dtype_of(found.expected), self.tolerances).ok

    def write_reproducer(self, model_path: str) -> str | None:
        """Write the last verification's reproducer to ``<stem>_repro/`` beside `model_path`; its path."""
        if self.last is None or self.last.reproducer is None:
            return None
        directory = os.path.abspath(directory_for(model_path))
        self.last.reproducer.write(directory)
        if self.last.diagnostic is not None and Prop.REPRODUCER not in self.last.diagnostic.properties:
            self.last.diagnostic.properties[Prop.REPRODUCER] = directory
            self.last.diagnostic.message += f" Reproducer: {directory}/run.py"
        return directory

    def _unoptimized_model(self) -> ir.Model | None:
        if self._unoptimized is not None and not self._unoptimized_final:
            from exporter.onnx_passes.finalize import onnx_passes

            onnx_passes(self.opset_version, optimize=False, modularize=False)(self._unoptimized)
            self._unoptimized_final = True
        return self._unoptimized


def _report_per_line(ctx: DiagnosticContext, bisection: divergence.Bisection) -> None:
    """One FXE0021 note per source line (what editors show inline): its compared values and worst error."""
    lines: dict[tuple[str, int], list[dict[str, Any]]] = {}
    stacks: dict[tuple[str, int], list] = {}
    for node, c in bisection.results.items():
        stack = stack_of(node)
        if not stack or not stack[0].is_user_code:
            continue
        key = (stack[0].path, stack[0].line)
        stacks.setdefault(key, stack)
        target = node.args[0] if node.target is operator.getitem else node
        lines.setdefault(key, []).append(
            {
                "fxNode": node.name,
                "fxTarget": str(target.target),
                "onnxOpTypes": bisection.op_types.get(target.name, []),
                **c.properties(),
                **io_properties(node),
            }
        )
    for key, ops in lines.items():
        failed = sum(not op["ok"] for op in ops)
        worst = max(op["maxAbsError"] for op in ops)
        op_types = sorted({t for op in ops for t in op["onnxOpTypes"]})
        ctx.report(
            rules.ACCURACY_DIVERGENCE,
            Level.NOTE,
            f"{len(ops)} values in onnxruntime → {', '.join(op_types)}; max abs error {worst:.3g}"
            + (f"; {failed} out of tolerance" if failed else ""),
            stack=stacks[key],
            checkedOps=len(ops),
            **{
                Prop.AGGREGATE: SOURCE_LINE,
                Prop.MISMATCHES: failed,
                Prop.MAX_ABS_ERROR: worst,
                Prop.ONNX_OP_TYPES: op_types,
                Prop.OPS: ops,
            },
        )


def _run(
    model: ir.Model, inputs: list[np.ndarray], config: dict[str, str] | None = None
) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """The feeds by input name and the outputs of `model` in onnxruntime, with session `config` entries (the
    session is freed after)."""
    session = ort_session.session(model, config)
    feeds = {i.name: x for i, x in zip(session.get_inputs(), inputs)}
    return feeds, session.run(None, feeds)


def _not_compared(drawn: dict[int, torch.fx.Node], matches: str) -> str:
    """Why the outputs in `drawn` (index → the node that drew their random numbers) were not compared."""
    indices = sorted(drawn)
    which = f"output {indices[0]} depends" if len(indices) == 1 else f"outputs {', '.join(map(str, indices))} depend"
    ops = ", ".join(dict.fromkeys(str(node.target) for node in drawn.values()))
    verdict = f"the other {matches}" if matches else "no other output to compare"
    return (
        f"Not verified: {which} on random numbers ({ops}), which onnxruntime draws apart from PyTorch, so "
        f"{'it' if len(indices) == 1 else 'they'} cannot be compared; {verdict}."
    )


def _outputs_summary(outputs: list[numerics.Comparison]) -> str:
    worst = max((c.max_abs_error for c in outputs), default=0.0)
    return f"max abs error {worst:.3g}"


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
