import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """With ``-n N --dist loadgroup`` (scripts/test.sh), the tests of a module that use a module-scoped
    fixture (a language server, a model export) run on one worker, which sets the fixture up once."""
    for item in items:
        fixturedefs = getattr(item, "_fixtureinfo", None)
        scopes = {d.scope for defs in (fixturedefs.name2fixturedefs.values() if fixturedefs else ()) for d in defs}
        if "module" in scopes:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))
