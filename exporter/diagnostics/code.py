"""A source line's code: without its trailing comment (torch-free: the language server uses it too)."""

from __future__ import annotations

import io
import tokenize


def code_of(line: str) -> str:
    """`line` without its comment and trailing whitespace (leading whitespace kept). A line that does
    not tokenize on its own (inside a bracket or a string) loses only a ``#`` after its last quote."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(line.rstrip("\r\n")).readline):
            if token.type == tokenize.COMMENT:
                return line[: token.start[1]].rstrip()
    except (tokenize.TokenError, SyntaxError):
        quote = max(line.rfind('"'), line.rfind("'"))
        hash_ = line.find("#", quote + 1)
        if hash_ >= 0:
            return line[:hash_].rstrip()
    return line.rstrip()
