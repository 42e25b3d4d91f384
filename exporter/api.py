"""`dynamo_export`, `ExportOptions` and the `Exporter` that runs the pipeline stage by stage."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import torch

from exporter.capture import adapters, dynamic
from exporter.capture import extractor as capture
from exporter.capture.fake import check_fake_consistency
from exporter.constants import Stage
from exporter.diagnostics import DiagnosticContext, Level, dynamic_report, rules, training_mode
from exporter.diagnostics.explain import explain, explain_eager, explain_script_modules, explain_var_keyword
from exporter.diagnostics.torch_logs import captured_logs
from exporter.errors import OnnxExporterError, is_out_of_memory
from exporter.onnx_passes import finalize
from exporter.options import ExportOptions, refuse_weight_settings
from exporter.output.program import ExportOutput
from exporter.passes import decompose, inline_grad_regions, type_promotion
from exporter.translate import analysis
from exporter.translate import python_functions as generate
from exporter.translate.fx_to_onnx import GraphTranslator, TranslationError
from exporter.translate.registry import default_registry

ProgressCallback = Callable[[str, dict[str, Any]], None]


class Exporter:
    """Runs capture → passes → analysis → translation → ONNX passes → (op-level debug)."""

    def __init__(
        self,
        options: ExportOptions,
        model: torch.nn.Module | Callable[..., Any],
        model_args: tuple[Any, ...],
        model_kwargs: dict[str, Any],
        *,
        progress: ProgressCallback | None = None,
        generate_functions: bool = True,
    ) -> None:
        self.options = options
        self.model = model
        self.model_args = model_args
        self.model_kwargs = model_kwargs
        self.registry = options.onnx_registry or default_registry()
        self.opset_version = options.target_opset  # the one the model gets (`finalize` ensures it)
        self.ctx = DiagnosticContext(options.diagnostic_options)
        self.progress = progress or (lambda stage, info: None)
        self.timings: dict[str, float] = {}
        self._dims: list[dynamic.InputDim] = []  # the input dims asked to be dynamic (after capture)
        self.input_adapter = adapters.InputAdapter()
        self.output_adapter = adapters.OutputAdapter()
        self.generate_functions = generate_functions and options.fake_context is None
        self._generator: generate.Generator | None = None
        self._verifier = None  # exporter.verify.accuracy.Verifier, once the model is final
        self._verified_model = None  # the model once verified (a failed verification keeps it in the ExportOutput)

    def export(self) -> ExportOutput:
        with captured_logs(self.ctx.logs):
            return self._export()

    def _export(self) -> ExportOutput:
        try:
            program = self._stage(Stage.CAPTURE, self._capture)
            self._check_outputs(program)
            program = self._stage(Stage.PASSES, self._run_passes, program)
            self._stage(Stage.ANALYSIS, self._analyze, program)
            model = self._stage(Stage.TRANSLATION, self._translate, program)
            if self.options.op_level_debug:
                from exporter.verify.op_debug import validate_ops

                self._stage(
                    Stage.OP_LEVEL_DEBUG,
                    validate_ops,
                    program,
                    self._translator,
                    model,
                    self.model_args,
                    self.model_kwargs,
                    self.ctx,
                    fake=self.options.fake_context is not None,
                )
            elif self._translator.custom_nodes and self.options.fake_context is None:
                from exporter.verify.op_debug import check_custom_translations

                self._stage(
                    Stage.OP_LEVEL_DEBUG,
                    check_custom_translations,
                    program,
                    self._translator,
                    model,
                    self.model_args,
                    self.model_kwargs,
                    self.ctx,
                )
            unoptimized = model.clone() if self.options.verify else None  # verify: was it the optimizer?
            self._stage(Stage.ONNX_PASSES, self._finalize, model)
            self._record_adapters(program, model)
            if self.options.fake_context is None:
                self._verifier = self._make_verifier(program, model, unoptimized)
            if (
                self._dims
                and self.options.second_size_check
                and self.options.fake_context is None
                and not self.ctx.errors()
            ):
                from exporter.verify import second_size

                self._stage(
                    Stage.SECOND_SIZE,
                    second_size.check,
                    program,
                    model,
                    self.input_adapter,
                    self.output_adapter,
                    self.model,
                    self.model_args,
                    self.model_kwargs,
                    dynamic.dim_names(program, self._dims),
                    self.ctx,
                    self.options.verify_tolerances,
                    self._static_export,
                )
            if self.options.verify and self._verifier is not None and not self.ctx.errors():
                self._stage(Stage.VERIFY, self._verifier.verify, self.model_args, self.model_kwargs, self.ctx)
                self._verified_model = model
            if self.ctx.errors():
                raise OnnxExporterErrorWithin(_errors_message(self.ctx))
        except OnnxExporterErrorWithin as e:
            raise OnnxExporterError(self._partial(e), str(e)) from e.__cause__
        except Exception as e:  # an unexpected failure still leaves a located result in the log
            if is_out_of_memory(e):
                raise
            message = f"Failed to export the model to ONNX: {type(e).__name__}: {e}"
            self.ctx.report(rules.FX_GRAPH_TO_ONNX, Level.ERROR, message, stack=capture.user_frames_of(e), exception=e)
            raise OnnxExporterError(self._partial(e), message) from e
        return ExportOutput(
            model,
            self.input_adapter,
            self.output_adapter,
            self.ctx,
            fake_context=self.options.fake_context,
            verifier=self._verifier,
        )

    def _static_export(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[..., list[Any]] | None:
        """The model exported with static shapes at `args`/`kwargs`' sizes, as a function running it in
        onnxruntime (the second-size check's measure of the model's own numerics there), or None."""
        from exporter.verify.second_size import run_static

        options = dataclasses.replace(
            self.options, dynamic_shapes=None, second_size_check=False, verify=False, op_level_debug=False
        )
        try:
            output = Exporter(options, self.model, args, kwargs).export()
        except Exception:  # noqa: BLE001 - no static graph: the check keeps its finding
            return None
        return lambda a, k: run_static(output, a, k)

    # -- stages -----------------------------------------------------------------------------

    def _stage(self, stage: Stage, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.progress(stage.value, {})
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.timings[stage.value] = self.ctx.timings[stage.value] = time.perf_counter() - start

    def _capture(self) -> torch.export.ExportedProgram:
        check_fake_consistency(self.model, self.model_args, self.model_kwargs, self.options.fake_context)
        extractor = capture.FXGraphExtractor()
        fake_mode = self.options.fake_context.fake_mode if self.options.fake_context is not None else None
        try:
            program = extractor.generate_fx(
                self.model,
                self.model_args,
                self.model_kwargs,
                dynamic_shapes=self.options.dynamic_shapes,
                ctx=self.ctx,
                fake_mode=fake_mode,
            )
        except capture.GraphCaptureError as e:
            first = e.attempts[0].error
            torch_message = f"{type(first).__name__}: {capture._first_line(first)}"
            violation = dynamic_report.constraint_violation(
                first, extractor.specializations, extractor.narrowings, self.options.dynamic_shapes, self._arguments()
            )
            if violation is not None:
                message, stack, details = violation
                self.ctx.report(
                    rules.DIMENSION_SPECIALIZED,
                    Level.ERROR,
                    message,
                    stack=stack,
                    exception=first,
                    torchMessage=torch_message,
                    **details,
                )
                raise OnnxExporterErrorWithin(message) from first
            location = e.location
            eager = capture.eager_error(self.model, self.model_args, self.model_kwargs) if fake_mode is None else None
            if eager is not None:  # not the export's failure: the model's own
                explanation, location = explain_eager(eager), capture.user_frames_of(eager) or location
            else:
                explanation = (
                    explain_script_modules(self.model)
                    or (
                        explain_var_keyword(
                            self.model, dynamic.var_keyword_tensors(self.model, self.model_args, self.model_kwargs)
                        )
                        if self.options.dynamic_shapes
                        else None
                    )
                    or next((x for a in e.attempts if (x := explain(a.error, location))), None)
                )
            if explanation is None:
                message, details = f"Could not capture the model: {torch_message}", {}
            else:
                message = f"{explanation.message} {explanation.fix}"
                details = {"cause": explanation.cause, "fix": explanation.fix, "torchMessage": torch_message}
            self.ctx.report(
                rules.GRAPH_CAPTURE,
                Level.ERROR,
                message,
                stack=location,
                exception=eager or first,
                strategies=[a.strategy for a in e.attempts],
                **details,
            )
            if eager is None:
                message = f"Could not capture the model as an FX graph: {message}" if explanation else str(e)
            raise OnnxExporterErrorWithin(message) from first
        self._dims = dynamic.requested_dims(program, self.options.dynamic_shapes)
        dynamic_report.report_specialized(
            self.ctx,
            program,
            self._dims,
            extractor.specializations,
            self._arguments(),
            extractor.assumptions,
            dynamic.unchecked_equalities(program),
            dynamic.captured_shapes(self.model),
        )
        training_mode.report(self.ctx, program, self.model)
        return program

    def _arguments(self) -> dict[str, int | str]:
        return dynamic.arguments(self.model, self.model_args, self.model_kwargs)

    def _check_outputs(self, program: torch.export.ExportedProgram) -> None:
        try:
            adapters.check_outputs(program, self.model)
        except adapters.UnsupportedOutputError as e:
            self.ctx.report(rules.INPUT_OUTPUT_ADAPTATION, Level.ERROR, str(e), stack=e.stack)
            raise OnnxExporterErrorWithin(str(e)) from e

    def _run_passes(self, program: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
        """Grad-mode regions inlined, decomposition (with functionalization), then explicit type
        promotion (FXE0010/FXE0015)."""
        self._fx_pass("inline grad regions", lambda: inline_grad_regions.inline_grad_regions(program))
        program = self._fx_pass("decompose", lambda: decompose.decompose(program, self.registry))
        modules = [m for m in program.graph_module.modules() if isinstance(m, torch.fx.GraphModule)]
        self._fx_pass("type promotion", lambda: sum(type_promotion.insert_type_promotion(m, self.ctx) for m in modules))
        return program

    def _fx_pass(self, name: str, run: Callable[[], Any]) -> Any:
        try:
            result = run()
        except Exception as e:
            self.ctx.report(
                rules.FX_PASS,
                Level.ERROR,
                f"FX pass {name} failed: {type(e).__name__}: {e}",
                exception=e,
                **{"pass": name},
            )
            raise OnnxExporterErrorWithin(f"FX pass {name} failed: {e}") from e
        self.ctx.report(rules.FX_PASS, Level.NONE, f"Ran FX pass {name}.", **{"pass": name})
        return result

    def _analyze(self, program: torch.export.ExportedProgram) -> None:
        describe = self._generated_function if self.generate_functions else None
        unsupported = analysis.find_unsupported(program.graph_module, self.registry, self.ctx, describe)
        if unsupported:
            raise OnnxExporterErrorWithin(
                f"Unsupported operators: {analysis.summary(unsupported)}. Register an ONNX function for each with "
                "OnnxRegistry.register_op (see the FXE0011 diagnostics for where they are called)."
            )

    def _generated_function(self, node: torch.fx.Node) -> dict[str, Any]:
        """FXE0011's ``generatedFunction``: a verified translation generated from a custom op's Python implementation."""
        if self._generator is None:
            self._generator = generate.Generator(self.opset_version, _export_without_generation, self.ctx)
        generated = self._generator(node)
        return {"generatedFunction": generated.properties()} if generated else {}

    def _translate(self, program: torch.export.ExportedProgram):
        translator = self._translator = GraphTranslator(
            self.registry, self.ctx, self.opset_version, on_node=self._on_node
        )
        self._translated = 0
        self._total = sum(1 for n in program.graph.nodes if n.op == "call_function")
        try:
            return translator.translate_program(program, dim_names=dynamic.dim_names(program, self._dims))
        except TranslationError as e:
            self.ctx.report(
                rules.FX_NODE_TO_ONNX,
                Level.ERROR,
                str(e),
                node=e.node,
                exception=e.__cause__,
                onnxFunction=e.function_name,
            )
            raise OnnxExporterErrorWithin(str(e)) from e

    def _on_node(self, node: torch.fx.Node, onnx_nodes: list) -> None:
        self._translated += 1
        if self._translated % 50 == 0 or self._translated == self._total:
            self.progress(Stage.TRANSLATION.value, {"done": self._translated, "total": self._total})

    def _finalize(self, model) -> None:
        try:
            finalize.finalize(
                model, self.opset_version, self.ctx, optimize=self.options.optimize, modularize=self.options.modularize
            )
        except finalize.PassFailed as e:
            raise OnnxExporterErrorWithin(str(e)) from e.__cause__

    def _record_adapters(self, program: torch.export.ExportedProgram, model) -> None:
        user_inputs = [
            s
            for s in program.graph_signature.input_specs
            if s.kind == torch.export.graph_signature.InputKind.USER_INPUT
        ]
        placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
        keep_in = tuple(
            adapters.is_graph_io(placeholders[s.arg.name].meta.get("val")) if hasattr(s.arg, "name") else False
            for s in user_inputs
        )
        self.input_adapter.append_step(adapters.FlattenInputStep(program.call_spec.in_spec))
        self.input_adapter.append_step(adapters.KeepGraphInputsStep(keep_in))
        self.input_adapter.append_step(adapters.ConvertComplexToRealStep())
        output_node = next(n for n in program.graph.nodes if n.op == "output")
        user_out = [
            arg
            for arg, spec in zip(output_node.args[0], program.graph_signature.output_specs)
            if spec.kind == torch.export.graph_signature.OutputKind.USER_OUTPUT
        ]
        keep_out = tuple(isinstance(a, torch.fx.Node) for a in user_out)
        self.output_adapter.append_step(adapters.FlattenOutputStep())
        self.output_adapter.append_step(adapters.KeepGraphOutputsStep(keep_out))
        self.output_adapter.append_step(adapters.ConvertComplexToRealOutputStep())

    def _make_verifier(self, program: torch.export.ExportedProgram, model, unoptimized):
        from exporter.verify.accuracy import Verifier

        return Verifier(
            program,
            self.model,
            model,
            unoptimized,
            self.input_adapter,
            self.output_adapter,
            opset_version=self.opset_version,
            tolerances=self.options.verify_tolerances,
        )

    def _partial(self, error: BaseException) -> ExportOutput:
        """What a failed export leaves: the diagnostics, and the model when only its verification failed."""
        return ExportOutput(
            self._verified_model,
            self.input_adapter,
            self.output_adapter,
            self.ctx,
            fake_context=self.options.fake_context,
            export_exception=error,
            verifier=self._verifier if self._verified_model is not None else None,
        )


class OnnxExporterErrorWithin(RuntimeError):
    """A failure already reported to the diagnostics context."""


def _export_without_generation(model: torch.nn.Module, args: tuple[Any, ...], options: ExportOptions) -> ExportOutput:
    """The exports `generate` runs: a missing operator there is not generated in turn."""
    return Exporter(options, model, args, {}, generate_functions=False).export()


def _errors_message(ctx: DiagnosticContext) -> str:
    errors = ctx.errors()
    message = f"{errors[0].rule.id} {errors[0].message}"
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more errors)"
    if any(e.properties.get("warningAsError") for e in errors):
        message += " Warnings were turned into errors by DiagnosticOptions(warnings_as_errors=True)."
    return message


def dynamo_export(
    model: torch.nn.Module | Callable[..., Any],
    /,
    *model_args: Any,
    export_options: ExportOptions | None = None,
    **model_kwargs: Any,
) -> ExportOutput:
    """Export `model` called with `model_args`/`model_kwargs` to ONNX.

    Raises `OnnxExporterError` on failure; its `export_output` still holds the diagnostics. The weight
    precision settings (``precision``, ``block_size`` …) are for `export_for_generation`: a `SettingError`.
    """
    export_options = export_options or ExportOptions()
    refuse_weight_settings(vars(export_options), "dynamo_export")
    return Exporter(export_options, model, model_args, model_kwargs).export()
