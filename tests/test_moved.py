"""The module names before the regroup into one package per stage still import until 0.3.0 (exporter/_moved.py):
each as the very module at its new place, with a DeprecationWarning that names the new place."""
import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

import exporter
from exporter._moved import MOVED, REMOVED_IN

ROOT = Path(__file__).resolve().parent.parent


def forget(name):
    """Drop an old name from the import system's memory, so the next import goes through the finder again."""
    sys.modules.pop(name, None)
    leaf = name.rpartition(".")[2]
    if leaf in vars(exporter):
        delattr(exporter, leaf)


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_an_old_name_imports_the_module_at_its_new_place_and_warns(old, new):
    forget(old)
    try:
        with pytest.warns(DeprecationWarning) as caught:
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)
        assert sys.modules[old] is module and module.__name__ == new
        messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
        assert messages == [f"{old} moved to {new}; the old name goes in {REMOVED_IN}"]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert importlib.import_module(old) is module      # once imported, a name is silent
    finally:
        forget(old)


def test_the_warning_points_at_the_importing_line():
    forget("exporter.catalog_native")
    try:
        with pytest.warns(DeprecationWarning) as caught:
            from exporter import catalog_native  # noqa: F401 - the old spelling, on purpose
        assert caught[0].filename == __file__
    finally:
        forget("exporter.catalog_native")


def test_no_old_module_is_left_as_a_file_and_every_new_place_exists():
    for old, new in MOVED.items():
        assert not (ROOT / (old.replace(".", "/") + ".py")).exists(), old
        assert (ROOT / (new.replace(".", "/") + ".py")).exists(), new


def public_names(path):
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return {n for n in names if not n.startswith("_") and n != "log"}


@pytest.mark.parametrize("package,module", [("exporter.signals", "exporter.signals.judgement"),
                                            ("exporter.sidecar", "exporter.sidecar.run")])
def test_a_module_that_became_a_package_keeps_its_public_names(package, module):
    """`exporter.signals` and `exporter.sidecar` were modules; their packages re-export what they defined."""
    old, new = importlib.import_module(package), importlib.import_module(module)
    names = public_names(ROOT / (module.replace(".", "/") + ".py"))
    assert names and set(old.__all__) >= names
    for name in names:
        assert getattr(old, name) is getattr(new, name), name


def test_the_removal_release_is_documented():
    for doc in ("README.md", "docs/contributing.md"):
        assert f"until {REMOVED_IN}" in (ROOT / doc).read_text(), doc
