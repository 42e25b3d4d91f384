"""Find export targets and ``nn.Module`` classes in Python source, statically (user code never runs).

A target is a function decorated with ``exporter.export_target`` in any import style::

    import exporter                          @exporter.export_target / @exporter.export_target(...)
    import exporter as ex                    @ex.export_target
    from exporter import export_target as t  @t / @t(...)

Only module-level functions are targets (also those under a module-level ``if``, ``try``, ...): the
export looks the target up in the module's namespace and calls it without arguments, so a method or
a nested function cannot be one.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

Result = TypeVar("Result")


@dataclasses.dataclass(frozen=True)
class Target:
    name: str
    line: int  # 0-based line of the ``def``
    end_line: int  # 0-based last line of the function
    decorator_line: int  # 0-based line of the decorator
    task: str | None = None  # the decorator's ``task="..."`` (``"text-generation"``), when a string literal


@dataclasses.dataclass(frozen=True)
class ModuleClass:
    name: str
    line: int
    end_line: int
    example_input: str  # Python expression for an example input, derived from the first layer


@dataclasses.dataclass(frozen=True)
class SyntaxProblem:
    message: str  # Python's, e.g. "invalid syntax"
    line: int  # 0-based


@dataclasses.dataclass(frozen=True)
class Discovery:
    targets: list[Target]
    modules: list[ModuleClass]
    imports_torch: bool
    imports_exporter: bool
    last_import_line: int  # 0-based line after which new imports go (-1: top of file)
    syntax_error: SyntaxProblem | None = None  # the source does not parse


def _task(decorator: ast.expr) -> str | None:
    """The ``task`` keyword of an ``@export_target(...)`` call, if it is a string literal."""
    keywords = decorator.keywords if isinstance(decorator, ast.Call) else []
    value = next((k.value for k in keywords if k.arg == "task"), None)
    return value.value if isinstance(value, ast.Constant) and isinstance(value.value, str) else None


def discover(source: str) -> Discovery:
    """Targets and module classes of `source`; a file with a syntax error has none, and says where it is."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return Discovery([], [], False, False, -1, SyntaxProblem(e.msg, (e.lineno or 1) - 1))
    aliases = _ImportAliases(tree)
    targets = [
        Target(node.name, node.lineno - 1, (node.end_lineno or node.lineno) - 1, decorator.lineno - 1, _task(decorator))
        for node in _module_level(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        for decorator in node.decorator_list
        if aliases.is_export_target(decorator)
    ]
    import_ends = [(n.end_lineno or n.lineno) - 1 for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return Discovery(
        targets,
        _module_classes(tree, aliases),
        imports_torch=bool(aliases.torch_names),
        imports_exporter=bool(aliases.exporter_modules or aliases.target_names),
        last_import_line=max(import_ends, default=-1),
    )


class Discoveries:
    """The discovery of each document's text, computed once per text, in a separate process: parsing a
    long file takes a while and holds the GIL, so in the server's process, even in a thread, it would
    hold up every other request. While a document does not parse, its last good discovery stands,
    with the syntax error. Other analyses of source text run in that process too (`run`)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[str, Discovery]] = {}  # uri -> (text, its discovery)
        self._good: dict[str, Discovery] = {}  # uri -> its last discovery without a syntax error
        self._parser: ProcessPoolExecutor | None = None  # started on first use

    async def get(self, uri: str, source: str) -> Discovery:
        last = self._last.get(uri)
        if last is not None and last[0] == source:
            return last[1]
        found = await self.run(discover, source)
        if found.syntax_error is None:
            self._good[uri] = found
        elif uri in self._good:
            found = dataclasses.replace(self._good[uri], syntax_error=found.syntax_error)
        self._last[uri] = (source, found)
        return found

    def forget(self, uri: str) -> None:
        self._last.pop(uri, None)
        self._good.pop(uri, None)

    def close(self) -> None:
        """Stop the parser process (a later call starts a new one)."""
        if self._parser is not None:
            self._parser.shutdown(cancel_futures=True)
            self._parser = None

    async def run(self, function: Callable[..., Result], *args: Any) -> Result:
        """`function(*args)` in the parser process (a module-level function, picklable arguments)."""
        if self._parser is None:
            self._parser = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        try:
            return await asyncio.wrap_future(self._parser.submit(function, *args))
        except BrokenProcessPool:  # the parser process died (killed?): this once here, a new one next time
            self._parser = None
            return function(*args)


def target_at(targets: list[Target], line: int) -> Target | None:
    """The target whose function encloses `line`, else the nearest one above it, else the first."""
    for target in targets:
        if target.decorator_line <= line <= target.end_line:
            return target
    above = [t for t in targets if t.line <= line]
    return above[-1] if above else (targets[0] if targets else None)


class _ImportAliases:
    """How the file can refer to ``exporter.export_target``, ``torch`` and ``torch.nn.Module``."""

    def __init__(self, tree: ast.Module) -> None:
        self.exporter_modules: set[str] = set()  # names bound to the exporter package
        self.target_names: set[str] = set()
        self.module_names: set[str] = set()  # names bound to torch.nn.Module
        self.nn_names: set[str] = set()  # names bound to torch.nn
        self.torch_names: set[str] = set()
        for node in _module_level(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    if alias.name in ("exporter", "exporter.targets"):
                        self.exporter_modules.add(alias.asname or alias.name)
                    if alias.name == "torch" or alias.name.startswith("torch."):
                        self.torch_names.add(bound)
                    if alias.name == "torch.nn" and alias.asname:
                        self.nn_names.add(alias.asname)
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    bound = alias.asname or alias.name
                    if node.module in ("exporter", "exporter.targets") and alias.name == "export_target":
                        self.target_names.add(bound)
                    if node.module == "torch" and alias.name == "nn":
                        self.nn_names.add(bound)
                    if node.module == "torch.nn" and alias.name == "Module":
                        self.module_names.add(bound)

    def is_export_target(self, decorator: ast.expr) -> bool:
        if isinstance(decorator, ast.Call):
            decorator = decorator.func
        if isinstance(decorator, ast.Name):
            return decorator.id in self.target_names
        return (
            isinstance(decorator, ast.Attribute)
            and decorator.attr == "export_target"
            and _dotted(decorator.value) in self.exporter_modules
        )

    def is_module_base(self, base: ast.expr) -> bool:
        dotted = _dotted(base)
        if dotted is None:
            return False
        if dotted in self.module_names:
            return True
        head, _, tail = dotted.rpartition(".")
        return tail == "Module" and (head in self.nn_names or head in {f"{t}.nn" for t in self.torch_names})


def _module_level(node: ast.AST) -> Iterator[ast.stmt]:
    """The statements that run in the module's namespace, in file order: those of `node`'s body and of
    the blocks nested in them (if, try, with, for, while, match), not those of functions or classes."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.stmt):
            yield child
        if isinstance(child, (ast.stmt, ast.excepthandler, ast.match_case)) and not isinstance(child, _SCOPES):
            yield from _module_level(child)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _module_classes(tree: ast.Module, aliases: _ImportAliases) -> list[ModuleClass]:
    examples: dict[str, str] = {}  # module class name -> example input
    found = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):  # file order: subclasses follow bases
        local_bases = [examples[name] for b in cls.bases if (name := _dotted(b)) in examples]
        if not local_bases and not any(aliases.is_module_base(b) for b in cls.bases):
            continue
        has_init = any(isinstance(n, ast.FunctionDef) and n.name == "__init__" for n in cls.body)
        examples[cls.name] = _example_input(cls) if has_init or not local_bases else local_bases[0]
        found.append(ModuleClass(cls.name, cls.lineno - 1, (cls.end_lineno or cls.lineno) - 1, examples[cls.name]))
    return found


def _example_input(cls: ast.ClassDef) -> str:
    """An example input guessed from the first layer built in ``__init__`` (a TODO if unknown)."""
    init = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
    for node in ast.walk(init) if init else ():
        if not isinstance(node, ast.Call) or not node.args:
            continue
        layer = (_dotted(node.func) or "").rsplit(".", 1)[-1]
        first = ast.unparse(node.args[0])
        if layer == "Linear":
            return f"torch.randn(2, {first})"
        if layer in ("Conv1d", "ConvTranspose1d"):
            return f"torch.randn(1, {first}, 64)"
        if layer in ("Conv2d", "ConvTranspose2d"):
            return f"torch.randn(1, {first}, 32, 32)"
        if layer in ("Conv3d", "ConvTranspose3d"):
            return f"torch.randn(1, {first}, 8, 16, 16)"
        if layer == "Embedding":
            return f"torch.randint(0, {first}, (1, 16))"
        if layer in ("LSTM", "GRU", "RNN"):
            return f"torch.randn(1, 16, {first})"
    return "torch.randn(1, 8)  # TODO: an example input of the right shape"


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None
