"""`analyze` and `parse` import only what they run: no simulator, server, generator or YAML parser (a config
file brings YAML in). Start-up cost itself is measured by bench/startup.py, not here."""
from __future__ import annotations

import json
import subprocess
import sys

from exporter.cli import build_parser, main

HEAVY = ("yaml", "prometheus_client", "watchdog", "http.server", "exporter.simulate", "exporter.web.server",
         "exporter.sidecar.run", "exporter.generate", "exporter.ingest.scrape")

PROBE = """import json, sys
from exporter.cli import main
rc = main(sys.argv[1:])
print(json.dumps([rc, sorted(m for m in sys.modules if m.startswith({heavy!r}))]), file=sys.stderr)
"""


def loaded(*args: str) -> tuple[int, list[str]]:
    out = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), *args], capture_output=True, text=True,
                         timeout=120, check=False)
    rc, modules = json.loads(out.stderr.strip().splitlines()[-1])
    return rc, modules


def test_analyze_and_parse_import_no_heavy_module(tmp_path):
    log = tmp_path / "one.log"
    log.write_text("[2025-08-11 17:10:00] The server is fired up and ready to roll!\n")
    assert loaded("analyze", str(log), "--format", "json", "-o", str(tmp_path / "r.json")) == (0, [])
    assert loaded("parse", str(log)) == (0, [])
    config = tmp_path / "c.yaml"
    config.write_text("profile: offline\n")
    rc, modules = loaded("analyze", str(log), "--config", str(config), "-o", str(tmp_path / "r.json"))
    assert rc == 0 and "yaml" in modules            # a config file is still read, with YAML


def test_simulate_keeps_its_arguments(capsys):
    assert main(["simulate", "--list"]) == 0
    assert "retraction_storm" in capsys.readouterr().out
    # the full parser (no command known) and another command's both name simulate
    for parser in (build_parser(), build_parser("analyze")):
        assert "simulate" in parser.format_help()
