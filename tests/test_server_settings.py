"""The server's export settings (configuration + request overrides) and per-target state."""

from __future__ import annotations

import os

import pytest
from lsprotocol import types

from onnxlens_server.protocol import ErrorCode, RequestError
from onnxlens_server.settings import export_settings
from onnxlens_server.state import States, TargetState
from onnxlens_server.traces import LineTrace


def test_configuration_and_request_overrides_are_kept_apart():
    configuration = {
        "opset": 20,
        "opLevelDebug": False,
        "verbosity": "DEBUG",
        "interpreter": "/py",
        "timeoutSeconds": 30,
        "outputFolder": "out",
    }
    chosen = export_settings({**configuration, "memoryLimitMB": 900}, {"opLevelDebug": True})
    assert chosen.settings == {"opset_version": 20, "op_level_debug": False, "verbosity": "debug"}
    assert chosen.overrides == {"op_level_debug": True}
    assert (chosen.timeout, chosen.output_folder, chosen.output_folder_chosen_by_user, chosen.memory_limit_mb) == (
        30.0,
        "out",
        False,
        900,
    )
    defaults = export_settings({}, {})
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert (defaults.settings, defaults.timeout, defaults.output_folder) == ({}, 300.0, "onnxlens-out")
    assert defaults.memory_limit_mb == memory // 2**21  # half of the machine, in MiB
    assert export_settings({"outputFolder": "~/o", "outputFolderScope": "user"}, {}).output_folder_chosen_by_user


@pytest.mark.parametrize(
    "configuration, overrides, message",
    [
        ({}, {"dynamic": True}, "Unknown export option 'dynamic'; known: dynamicShapes, opLevelDebug, opset"),
        ({"opset": "18"}, {}, "export option 'opset_version' must be an integer, got '18'"),
        ({"opset": 99}, {}, "export option 'opset_version' must be from 18 to 25, got 99"),
        (
            {},
            {"dynamicShapes": 3},
            "export option 'dynamic_shapes' must be true or false or a dynamic shapes spec, got 3",
        ),
        ({}, {"verbosity": "loud"}, "export option 'verbosity' must be one of debug, info, warning, error"),
        ({"memoryLimitMB": -1}, {}, "memoryLimitMB must be a whole number of MiB >= 0"),
        ({"memoryLimitMB": "2G"}, {}, "memoryLimitMB must be a whole number of MiB >= 0"),
    ],
)
def test_bad_settings_are_refused_with_their_code(configuration, overrides, message):
    with pytest.raises(RequestError, match=message) as raised:
        export_settings(configuration, overrides)
    assert raised.value.code == ErrorCode.INVALID_OPTIONS


def problem(line: int, related_line: int) -> types.Diagnostic:
    at = types.Range(types.Position(line, 4), types.Position(line, 9))
    related = types.DiagnosticRelatedInformation(
        types.Location("file:///m/a.py", types.Range(types.Position(related_line, 0), types.Position(related_line, 3))),
        "from here",
    )
    return types.Diagnostic(range=at, message="m", related_information=[related])


def test_problems_and_traces_follow_edits_above_them():
    states = States()
    changed = states.replace(
        "/m/a.py::t",
        TargetState(
            diagnostics={"/m/a.py": [problem(10, 2)], "/m/b.py": [problem(1, 20)]},
            traces=[LineTrace("/m/a.py", 12, [], [], 0.0, 0)],
        ),
    )
    assert changed == {"/m/a.py", "/m/b.py"}
    assert states.follow_edits("/m/a.py", [(5, 2)])  # two lines added after line 5
    (moved,) = states.diagnostics("/m/a.py")
    assert (
        moved.range.start.line == 12 and moved.related_information[0].location.range.start.line == 2
    )  # line 2 is above the edit
    (other,) = states.diagnostics("/m/b.py")
    assert (
        other.range.start.line == 1 and other.related_information[0].location.range.start.line == 22
    )  # b.py's stack points into a.py
    assert [t.line for t in states.traces("/m/a.py")] == [14]
    assert not states.follow_edits("/m/a.py", [(40, 1)])  # below every problem
    assert states.replace("/m/a.py::t", TargetState()) == {
        "/m/a.py",
        "/m/b.py",
    }  # the old problems' files are republished
    assert states.diagnostics("/m/a.py") == []
