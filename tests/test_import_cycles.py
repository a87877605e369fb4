"""No module of exporter/ imports one that imports it back, directly or through others (a circle means two
modules that only make sense together; TYPE_CHECKING imports count too: they are the same coupling)."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "exporter"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """The exporter modules `path` imports (a package's own __init__ and its submodules both count as what
    they name: `from exporter.x import y` imports exporter.x.y when that is a module, else exporter.x)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in known:
                    out.add(full)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    known = set(paths)
    graph = {name: _imports(path, name, known) for name, path in paths.items()}
    # a package's __init__ that imports its own submodules is how a package names its public API, not a circle
    for name in graph:
        graph[name] = {m for m in graph[name] if not (name.startswith(m + ".") and _is_package(paths[m]))}
    return graph


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}      # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


# Circles known and not yet broken, each an import that is left out of the graph. Only ever shrinks (the last,
# cli <-> cli.healthcheck, went when the command line was split into its grammar and its commands).
KNOWN: set[tuple[str, str]] = set()


def test_no_module_imports_one_that_imports_it_back():
    graph = import_graph()
    for a, b in KNOWN:
        graph.get(a, set()).discard(b)
    cycle = find_cycle(graph)
    assert cycle is None, "import circle: " + " -> ".join(cycle or ())


def test_the_grammar_modules_import_no_circle():
    graph = import_graph()
    grammar = "exporter.ingest.grammar."
    assert "exporter.ingest.grammar.block" in graph[grammar + "parser"]
    for helper in ("anchored", "block"):
        assert grammar + "parser" not in graph[grammar + helper]
        assert grammar + "scanning" in graph[grammar + helper]


def test_the_check_finds_a_circle_through_a_type_checking_import(tmp_path):
    # the grammar's old circle: parser imports block, block imports parser's Parser for its annotations
    pkg = tmp_path / "exporter"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "parser.py").write_text("from exporter import block\n")
    (pkg / "block.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from exporter.parser import Parser\n")
    known = {"exporter", "exporter.parser", "exporter.block"}
    graph = {_module_name_in(tmp_path, p): _imports(p, _module_name_in(tmp_path, p), known)
             for p in pkg.glob("*.py")}
    assert find_cycle(graph) in (["exporter.block", "exporter.parser", "exporter.block"],
                                 ["exporter.parser", "exporter.block", "exporter.parser"])


def _module_name_in(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)
