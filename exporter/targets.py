"""Export targets: functions decorated with `@export_target` that return ``(model, args[, kwargs])``."""

from __future__ import annotations

import contextlib
import importlib.machinery
import linecache
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

TARGET_ATTRIBUTE = "__onnxlens_target__"
TASK_ATTRIBUTE = "__onnxlens_task__"
DEFINED_AT_ATTRIBUTE = "__onnxlens_defined_at__"  # (path, line) of a target not defined in Python code
TEXT_GENERATION = "text-generation"  # `exporter.export_for_generation`
TASKS = (TEXT_GENERATION,)
# The settings a text-generation export cannot take (its dynamic shapes are its own, its check is
# generating): refused when set (true or a spec). second_size_check is moot (the generation check runs
# the graph at many sizes); the other settings apply as to any export.
GENERATION_FIXED = ("dynamic_shapes", "op_level_debug", "verify")


def export_target(fn: Callable[..., Any] | None = None, /, *, task: str | None = None, **options: Any) -> Any:
    """Mark a function as an export target; ``@export_target(dynamic_shapes=True)`` adds options
    (the settings of `exporter.options.SETTINGS`, checked here: a bad one raises `ValueError` at the
    decorator). ``task="text-generation"`` exports the causal LM (or encoder–decoder model) it returns
    for generation (`exporter.export_for_generation`)."""
    from exporter.options import parse_settings

    parsed = parse_settings(options)
    if task is not None and task not in TASKS:
        raise ValueError(f"unknown export task {task!r}; known: {', '.join(TASKS)}")

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        setattr(f, TARGET_ATTRIBUTE, parsed)
        if task is not None:
            setattr(f, TASK_ATTRIBUTE, task)
        return f

    return mark(fn) if fn is not None else mark


class TargetError(ValueError):
    """A target is missing or returned something that cannot be exported."""


class UserExit(RuntimeError):
    """User code called ``sys.exit()`` while the exporter ran it (`exits_refused`)."""


@contextlib.contextmanager
def exits_refused(where: str, hint: str = "") -> Iterator[None]:
    """Run user code (`where`: "in export target f") where ``sys.exit()`` (an argparse usage error at import,
    a script's ``exit()``) must not end the exporting process: it raises a `UserExit` (with `hint`) with the
    traceback of the exit, so it is reported at the user's line."""
    try:
        yield
    except SystemExit as e:
        error = UserExit(f"sys.exit({e.code!r}) was called {where}{hint}")
        raise error.with_traceback(e.__traceback__) from None


def build_target(fn: Callable[..., Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Call a target and check it returned ``(model, args)`` or ``(model, args, kwargs)``."""
    name = getattr(fn, "__qualname__", repr(fn))
    with exits_refused(f"in export target {name}"):
        result = fn()
    if not isinstance(result, tuple) or len(result) not in (2, 3):
        raise TargetError(
            f"export target {name} must return (model, args) or (model, args, kwargs), got {type(result).__name__}"
        )
    model, args, *rest = result
    kwargs = rest[0] if rest else {}
    if not callable(model):
        raise TargetError(f"export target {name}: the model ({type(model).__name__}) is not callable")
    if not isinstance(args, (tuple, list)):
        args = (args,)
    if not isinstance(kwargs, dict):
        raise TargetError(f"export target {name}: kwargs must be a dict, got {type(kwargs).__name__}")
    return model, tuple(args), kwargs


def target_options(fn: Callable[..., Any]) -> dict[str, Any]:
    """The target's own ``@export_target(...)`` options, parsed."""
    return dict(getattr(fn, TARGET_ATTRIBUTE, {}))


def target_task(fn: Callable[..., Any]) -> str | None:
    """The target's ``task`` (``"text-generation"``), or None for a plain export."""
    return getattr(fn, TASK_ATTRIBUTE, None)


def build_generation_target(fn: Callable[..., Any]) -> tuple[Any, dict[str, Any]]:
    """Call a text-generation target: it returns the model, or ``(model, args[, kwargs])`` whose
    ``input_ids`` (the first argument) and ``attention_mask`` are the prompt of the generation check.
    The model and the `export_for_generation` arguments for that prompt."""
    name = getattr(fn, "__qualname__", repr(fn))
    with exits_refused(f"in export target {name}"):
        result = fn()
    model, args, kwargs = build_target(_returning(result, name)) if isinstance(result, tuple) else (result, (), {})
    if not hasattr(model, "generate") or not hasattr(model, "config"):
        kind = "a Hugging Face causal LM or encoder–decoder model"
        raise TargetError(f"export target {name}: a text-generation target returns {kind}, got {type(model).__name__}")
    prompt = args[0] if args else kwargs.get("input_ids")
    return model, {"prompt": prompt, "attention_mask": kwargs.get("attention_mask")} if prompt is not None else {}


def _returning(result: Any, name: str) -> Callable[[], Any]:
    """A function returning `result`, named `name` (for `build_target`'s messages)."""

    def target() -> Any:
        return result

    target.__qualname__ = name
    return target


def targets_at(path: str) -> dict[str, Callable[..., Any]]:
    """The export targets of a Python file (`find_targets`), or of a Hugging Face model folder (one:
    `pretrained_target`)."""
    if not os.path.isdir(path):
        return find_targets(load_module(path))
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise TargetError(f"{path} is a folder without config.json: not a model saved with save_pretrained")
    target = pretrained_target(path)
    return {target.__name__: target}


def pretrained_target(folder: str) -> Callable[[], Any]:
    """A text-generation target loading the model saved in `folder` as the class it was saved from
    (its config's ``architectures``: a causal LM, Whisper, T5, …) in float32, named after the folder."""
    folder = os.path.abspath(folder)

    def target() -> Any:
        import transformers

        config = transformers.AutoConfig.from_pretrained(folder)
        name = (config.architectures or ["AutoModelForCausalLM"])[0]
        model_class = getattr(transformers, name, None)
        if model_class is None:
            raise TargetError(
                f"{folder}: transformers has no model class {name} (the config's architectures); load the model "
                'in a function marked @exporter.export_target(task="text-generation") and export that'
            )
        model, loading = model_class.from_pretrained(folder, dtype="float32", output_loading_info=True)
        missing = sorted({*loading.get("missing_keys", ()), *(k for k, *_ in loading.get("mismatched_keys", ()))})
        if missing:  # from_pretrained initialized them at random: that model is not the one saved
            shown = ", ".join(missing[:3]) + (", …" if len(missing) > 3 else "")
            raise TargetError(
                f"{folder}: its checkpoint has no weights for {len(missing)} of the model's tensors ({shown}); "
                "loaded, they would be random"
            )
        return model.eval()

    target.__name__ = target.__qualname__ = os.path.basename(folder.rstrip(os.sep)) or "model"
    setattr(target, DEFINED_AT_ATTRIBUTE, (os.path.join(folder, "config.json"), 1))  # where its results go
    return export_target(task=TEXT_GENERATION)(target)


def load_module(path: str, source: str | None = None) -> types.ModuleType:
    """Import a Python file as a fresh module, as running it would: its folder goes first on sys.path,
    ``sys.argv`` is the file alone while it runs;
    a file inside a package (folders with ``__init__.py``) is that package's module, as ``python -m
    package.file`` imports it (its relative imports work; the package's parent folder goes on sys.path).

    `source`, when given, is run instead of the file's text (an editor's unsaved buffer); stack
    traces and diagnostics then quote that text under the file's path.
    """
    path = os.path.abspath(path)
    if source is None:
        if not os.path.isfile(path):
            raise TargetError(f"no such file: {path}")
        with open(path, encoding="utf-8") as f:
            source = f.read()
    linecache.cache[path] = (len(source), None, source.splitlines(keepends=True), path)
    folder, stem = os.path.split(os.path.splitext(path)[0])
    package, package_root = _package_of(folder)
    if package:
        name = package if stem == "__init__" else f"{package}.{stem}"
    else:
        name = stem if stem.isidentifier() and stem not in sys.modules else f"onnxlens_user_{abs(hash(path)):x}"
    module = types.ModuleType(name)
    module.__file__ = path
    module.__package__ = package or None
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, origin=path, is_package=stem == "__init__")
    if stem == "__init__":
        module.__path__ = [folder]
    sys.modules[name] = module
    for entry in filter(None, (package_root, folder)):  # lazy imports need them too
        _forget_shadowed(entry)
        if entry not in sys.path:
            sys.path.insert(0, entry)
    hint = ' (a script\'s code runs at import: put it under `if __name__ == "__main__":`)'
    argv, sys.argv = sys.argv, [path]  # as running it has them: no arguments (for a script's argparse at import)
    try:
        with exits_refused(f"while importing {os.path.basename(path)}", hint):
            exec(compile(source, path, "exec"), module.__dict__)
    finally:
        sys.argv = argv
    return module


def _forget_shadowed(folder: str) -> None:
    """Forget the user modules imported from elsewhere under a name `folder` holds (another model file's
    sibling ``layers.py``, in a process that checks several): the file imports its own, as running it would."""
    from exporter.diagnostics.locations import is_user_file

    try:
        entries = os.listdir(folder)
    except OSError:
        return
    names = {e[:-3] for e in entries if e.endswith(".py")}
    names |= {e for e in entries if os.path.isfile(os.path.join(folder, e, "__init__.py"))}
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.partition(".")[0] in names and path and is_user_file(path):
            if not os.path.abspath(path).startswith(folder + os.sep):
                del sys.modules[name]


def _package_of(folder: str) -> tuple[str, str | None]:
    """The dotted name of the package `folder` is (``""``: not in a package) and the folder it is in."""
    parts = []
    while os.path.isfile(os.path.join(folder, "__init__.py")) and os.path.basename(folder).isidentifier():
        folder, part = os.path.split(folder)
        parts.append(part)
    return ".".join(reversed(parts)), folder if parts else None


def find_targets(module: types.ModuleType) -> dict[str, Callable[..., Any]]:
    """The module's export targets by name, in definition order."""
    return {
        name: obj
        for name, obj in vars(module).items()
        if callable(obj) and hasattr(obj, TARGET_ATTRIBUTE) and getattr(obj, "__module__", None) == module.__name__
    }
