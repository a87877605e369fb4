"""Old module names (before the regroup into one package per stage, issue 35) kept importable until 0.3.0.

`import exporter.catalog_native` still works: a finder on `sys.meta_path` answers each old name with the module
object at its new place (`exporter.catalog.native`), so both names share one module and its state, and
warns with a DeprecationWarning naming the new place. `exporter.catalog`, `exporter.signals`,
`exporter.sidecar` and `exporter.cli` need no entry: they are packages now that re-export the old names.
"""
from __future__ import annotations

import importlib
import importlib.machinery
import sys
import warnings
from types import ModuleType

REMOVED_IN = "0.3.0"

MOVED = {
    "exporter.catalog_errors": "exporter.catalog.errors",
    "exporter.catalog_failures": "exporter.catalog.failures",
    "exporter.catalog_gateway": "exporter.catalog.gateway",
    "exporter.catalog_meta": "exporter.catalog.meta",
    "exporter.catalog_metrics": "exporter.catalog.metrics",
    "exporter.catalog_model": "exporter.catalog.model",
    "exporter.catalog_native": "exporter.catalog.native",
    "exporter.catalog_ranges": "exporter.catalog.ranges",
    "exporter.catalog_serving": "exporter.catalog.serving",
    "exporter.catalog_signals": "exporter.catalog.signals",
    "exporter.catalog_slo": "exporter.catalog.slo",
    "exporter.catalog_tuning": "exporter.catalog.tuning",
    "exporter.scrape": "exporter.ingest.scrape",
    "exporter.failures": "exporter.state.failures",
    "exporter.signals_errors": "exporter.signals.errors",
    "exporter.signals_serving": "exporter.signals.serving",
    "exporter.signals_tuning": "exporter.signals.tuning",
    "exporter.advice": "exporter.signals.advice",
    "exporter.server": "exporter.web.server",
    "exporter.listener": "exporter.web.listener",
    "exporter.connection": "exporter.web.connection",
    "exporter.http_message": "exporter.web.message",
    "exporter.expose": "exporter.web.expose",
    "exporter.status_page": "exporter.web.status_page",
    "exporter.svg_chart": "exporter.web.svg_chart",
    "exporter.markdown_html": "exporter.web.markdown",
    "exporter.recent": "exporter.web.recent",
    "exporter.analyze": "exporter.report.analyze",
    "exporter.analyze_text": "exporter.report.text",
    "exporter.report_html": "exporter.report.html",
    "exporter.startup": "exporter.sidecar.startup",
    "exporter.readback": "exporter.sidecar.readback",
    "exporter.checkpoint": "exporter.sidecar.checkpoint",
    "exporter.source_health": "exporter.sidecar.source_health",
    "exporter.flags": "exporter.releases.flags",
    "exporter.healthcheck": "exporter.cli.healthcheck",
    "exporter.demo": "exporter.cli.demo",
    "exporter.logging_setup": "exporter.cli.logging_setup",
}


class MovedModules:
    """Finds an old name and loads it as the module at its new place.

    The import system calls these three methods by name; the `importlib.abc` bases would add nothing but their
    import, 20 ms of every start-up (it pulls in `importlib.resources`)."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)  # type: ignore[arg-type]  # a Loader by its methods

    def create_module(self, spec) -> ModuleType:
        new = MOVED[spec.name]
        # stacklevel 2: the warnings module skips the import system's own frames, so this names the importer
        warnings.warn(f"{spec.name} moved to {new}; the old name goes in {REMOVED_IN}", DeprecationWarning,
                      stacklevel=2)
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module at the new place is already executed."""


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
