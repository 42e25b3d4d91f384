"""Mutation audit: plant deliberate bugs one at a time and check that pytest catches each.

Run on demand (not in CI), with the project's interpreter, from anywhere:

    .venv/bin/python scripts/mutation_audit.py [NAME ...]

The working tree is copied to a temporary directory (tracked and untracked, not ignored, files);
each mutation edits the copy, runs its pytest selection there with the copy first on the import
path, and is undone. The real tree is never modified. Prints a table: mutation -> caught (by which
tests) or survived; exits 1 if any mutation survived or no longer applies.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Mutation:
    """A deliberate bug: replace `old` (exactly once) with `new` in `file`, then run `pytest_args`."""

    name: str
    file: str  # relative to the repository root
    old: str
    new: str
    pytest_args: tuple[str, ...]


CORPUS_STATIC = "tests/test_corpus.py::test_export_matches_eager"
CORPUS_DYNAMIC = "tests/test_corpus.py::test_dynamic_export_matches_eager_at_two_shapes"
OP_DEBUG_TESTS = (
    "tests/test_op_debug.py",
    "tests/test_diagnostics.py::test_op_level_debug_flags_exactly_the_wrong_node",
    "tests/test_diagnostics.py::test_warnings_as_errors_fails_the_export_clearly",
)

MUTATIONS: list[Mutation] = [
    Mutation(
        "outputs reversed (graph and output adapter alike)",
        "exporter/capture/adapters.py",
        "    children, _ = pytree.tree_flatten(outputs, is_leaf=lambda x: x is not outputs)\n",
        "    children = pytree.tree_flatten(outputs, is_leaf=lambda x: x is not outputs)[0][::-1]\n",
        (CORPUS_STATIC, "-k", "not hf_"),
    ),
    Mutation(
        "input adapter keeps Python-scalar leaves as graph inputs",
        "exporter/capture/adapters.py",
        "        return [a for a, k in zip(args, self.keep) if k], kwargs\n",
        "        return [a for a, k in zip(args, self.keep) if k or isinstance(a, (int, float))], kwargs\n",
        (CORPUS_STATIC, "-k", "kwargs"),
    ),
    Mutation(
        "last dim of every input stays static under dynamic_shapes=True",
        "exporter/capture/extractor.py",
        "            return {i: torch.export.Dim.AUTO for i in range(x.dim())}\n",
        "            return {i: torch.export.Dim.AUTO for i in range(x.dim() - 1)}\n",
        (CORPUS_DYNAMIC, "-k", "not hf_"),
    ),
    Mutation(
        "op-level-debug float32 tolerance loosened to 0.1",
        "exporter/verify/op_debug.py",
        "    torch.float32: (1e-5, 1e-4),\n",
        "    torch.float32: (0.1, 0.1),\n",
        OP_DEBUG_TESTS,
    ),
    Mutation(
        "op-level-debug float32 tolerance loosened to 1.0",
        "exporter/verify/op_debug.py",
        "    torch.float32: (1e-5, 1e-4),\n",
        "    torch.float32: (1.0, 1.0),\n",
        OP_DEBUG_TESTS,
    ),
    Mutation(
        "op-level-debug tolerance 1e9",
        "exporter/verify/op_debug.py",
        "    check.atol, check.rtol = TOLERANCES.get(dtype, (0.0, 0.0))\n",
        "    check.atol, check.rtol = 1e9, 1e9\n",
        OP_DEBUG_TESTS,
    ),
    Mutation(
        "SARIF start line off by one",
        "exporter/diagnostics/sarif.py",
        "    region = sarif.Region(start_line=frame.line)\n",
        "    region = sarif.Region(start_line=frame.line + 1)\n",
        ("tests/test_diagnostics.py",),
    ),
    Mutation(
        "output adapter drops the last output",
        "exporter/capture/adapters.py",
        "        return [o for o, k in zip(outputs, self.keep) if k]\n",
        "        return [o for o, k in zip(outputs, self.keep) if k][:-1]\n",
        ("tests/test_seed_examples.py", "tests/test_api.py", CORPUS_STATIC, "-k", "not hf_"),
    ),
    Mutation(
        "every diagnostic range collapsed to column 0",
        "server/sarif_to_lsp.py",
        "    return types.Range(types.Position(line, start), types.Position(line, max(end, start)))\n",
        "    return types.Range(types.Position(line, 0), types.Position(line, 0))\n",
        ("tests/test_server.py",),
    ),
    Mutation(
        "every other code-action request answers empty",
        "server/server.py",
        "    uri = params.text_document.uri\n    _, source = ls.document(uri)\n    found = discover(source)\n",
        "    ls.code_action_count = getattr(ls, 'code_action_count', 0) + 1\n"
        "    if ls.code_action_count % 2 == 0:\n        return []\n"
        "    uri = params.text_document.uri\n    _, source = ls.document(uri)\n    found = discover(source)\n",
        ("tests/test_server.py",),
    ),
]


@dataclasses.dataclass
class Outcome:
    mutation: Mutation
    status: str  # "caught", "survived", "not applied" or "error"
    detail: list[str]


SHOWN_FAILURES = 6  # failing tests listed per mutation
SKIPPED_DIRS = {".venv", "node_modules"}  # environments, in case .gitignore does not list them


def copy_tree(destination: pathlib.Path) -> None:
    """Copy the working tree's tracked and untracked (not ignored) files."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for name in listed:
        if not name or name.split("/")[0] in SKIPPED_DIRS:
            continue
        source = REPO / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)


def environment(root: pathlib.Path) -> dict[str, str]:
    """The copy first on the import path (before the editable install); no stale bytecode."""
    bin_dir = os.path.dirname(sys.executable)
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
    }


def check_imports_copy(root: pathlib.Path) -> None:
    for package in ("exporter", "onnxlens_server"):
        found = subprocess.run(
            [sys.executable, "-c", f"import {package}; print({package}.__file__)"],
            cwd=root,
            env=environment(root),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not pathlib.Path(found).resolve().is_relative_to(root.resolve()):
            raise SystemExit(f"{package} imports from {found}, not from the scratch copy {root}")


def run(mutation: Mutation, root: pathlib.Path) -> Outcome:
    path = root / mutation.file
    original = path.read_text()
    if original.count(mutation.old) != 1:
        return Outcome(
            mutation,
            "not applied",
            [f"{mutation.file}: the text to replace occurs {original.count(mutation.old)} times"],
        )
    path.write_text(original.replace(mutation.old, mutation.new))
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--tb=no", "-rfE", *mutation.pytest_args],
            cwd=root,
            env=environment(root),
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(original)
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", result.stdout, flags=re.MULTILINE)
    summary = result.stdout.strip().splitlines()[-1:] if result.stdout.strip() else [result.stderr.strip()[-300:]]
    if result.returncode == 0:
        return Outcome(mutation, "survived", summary)
    if result.returncode == 1 and failed:
        shown = failed[:SHOWN_FAILURES] + (
            [f"... and {len(failed) - SHOWN_FAILURES} more"] if len(failed) > SHOWN_FAILURES else []
        )
        return Outcome(mutation, "caught", summary + shown)
    return Outcome(mutation, "error", summary)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="run only the mutations whose name contains one of these")
    names = parser.parse_args().names
    chosen = [m for m in MUTATIONS if not names or any(n in m.name for n in names)]
    with tempfile.TemporaryDirectory(prefix="onnxlens-mutants-") as scratch:
        root = pathlib.Path(scratch)
        copy_tree(root)
        check_imports_copy(root)
        outcomes = []
        for mutation in chosen:
            print(f"... {mutation.name}", flush=True)
            outcomes.append(run(mutation, root))
    print("\n| mutation | result | failing tests |\n|---|---|---|")
    for o in outcomes:
        print(f"| {o.mutation.name} | {o.status} | {'<br>'.join(o.detail)} |")
    return 0 if all(o.status == "caught" for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
