"""Every generated file of the repository from one validated `Config`: `render(config) -> {path: text}`.

`sglang-exporter generate` writes that dict and `--check` diffs it; there is no other regeneration path.
Each module renders one kind of output with its own `render(config)`; this one only merges them.
"""
from __future__ import annotations

from pathlib import Path

from exporter.config import Config

# Directories whose every file is generated: a file there that `render` no longer makes is stale.
GENERATED_DIRS = ("docs/runbooks",)


def render(config: Config | None = None) -> dict[str, str]:
    """Repository-relative path -> text of every generated file."""
    from exporter.generate import (
        alertmanager,
        alerts_doc,
        component,
        dashboards,
        gateway,
        helm,
        kubernetes,
        metrics_doc,
        promtool,
        rules,
        runbooks,
        slo,
        sources,
    )
    from exporter.releases import compatibility
    config = config or Config()
    files: dict[str, str] = {}
    for module in (rules, slo, promtool, alertmanager, runbooks, alerts_doc, sources, dashboards, metrics_doc, helm,
                   gateway):
        files.update(module.render(config))
    files[compatibility.PATH] = compatibility.render()
    files.update(kubernetes.render_from(files))
    files.update(component.render_from(files))
    return files


def stale(files: dict[str, str], root: Path) -> list[str]:
    """Paths (relative to root) that differ from `files`, are missing, or are left over in a generated dir."""
    out = [rel for rel, text in files.items()
           if not (root / rel).is_file() or (root / rel).read_text(encoding="utf-8") != text]
    for folder in GENERATED_DIRS:
        if not any(rel.startswith(folder + "/") for rel in files):
            continue        # a partial render (one module's files) says nothing about this folder
        out += [str(p.relative_to(root)) for p in sorted((root / folder).glob("*"))
                if p.is_file() and str(p.relative_to(root)) not in files]
    return out


def write(files: dict[str, str], root: Path) -> list[str]:
    """Write what changed, remove left-overs of generated dirs; return the paths touched."""
    touched = stale(files, root)
    for rel in touched:
        path = root / rel
        if rel in files:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[rel], encoding="utf-8")
        else:
            path.unlink()
    return touched
