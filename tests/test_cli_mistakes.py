"""Every typical mistake at the command line tells what to do instead: the subcommand's own usage, the option
meant, the path with a hint, the flag (or variable, or default) that chose a taken port. One test per mistake,
each with the exact message (issue 33)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.cli import build_parser, main
from exporter.config import DEFAULT_PORT

ROOT = Path(__file__).resolve().parents[1]
LOG = "[2025-08-11 17:10:00] The server is fired up and ready to roll!\n"


def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "exporter", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def last_line(text: str) -> str:
    assert "Traceback" not in text, text
    return text.strip().splitlines()[-1]


def usage(text: str) -> str:
    return text.strip().splitlines()[0]


@pytest.fixture
def log(tmp_path) -> Path:
    p = tmp_path / "sglang.log"
    p.write_text(LOG)
    return p


def test_a_misspelt_option_is_reported_by_its_subcommand_with_the_option_meant(log, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "--fromat", "json", str(log)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert usage(err).startswith("usage: sglang-exporter analyze [-h]")
    assert last_line(err) == ("sglang-exporter analyze: error: unrecognized arguments: --fromat "
                              "(did you mean --format?)")


def test_no_abbreviations_log_fil_is_not_log_file(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--log-fil", "/var/log/sglang.log"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert usage(err).startswith("usage: sglang-exporter serve [-h]")
    assert last_line(err) == ("sglang-exporter serve: error: unrecognized arguments: --log-fil "
                              "/var/log/sglang.log (did you mean --log-file?)")


def test_every_parser_refuses_abbreviations():
    parser = build_parser()
    assert parser.allow_abbrev is False
    assert all(sp.allow_abbrev is False for sp in parser.commands.values())


def test_an_option_of_another_command_names_that_command(log, capsys):
    with pytest.raises(SystemExit):
        main(["analyze", "--sglang-url", "http://127.0.0.1:30000", str(log)])
    assert last_line(capsys.readouterr().err) == (
        "sglang-exporter analyze: error: unrecognized arguments: --sglang-url "
        "(--sglang-url is an option of serve, not of analyze)")


def test_a_misspelt_command_suggests_the_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyse", "x.log"])
    assert exc.value.code == 2
    assert last_line(capsys.readouterr().err) == (
        "sglang-exporter: error: unknown command 'analyse' (did you mean analyze?); commands: serve, parse, "
        "analyze, check-config, generate, simulate, healthcheck, demo")


def test_every_subcommand_has_a_description_and_every_argument_help():
    parser = build_parser()
    for name, sp in parser.commands.items():
        assert sp.description and sp.description.endswith("."), name
        for action in sp._actions:
            assert action.help, (name, action.dest)
    analyze = parser.commands["analyze"].format_help()
    assert "(default text)" in analyze                      # defaults are shown
    assert "FILE                  SGLang log files" in analyze


def test_time_units_say_wall_clock_or_simulated():
    parser = build_parser()
    demo = parser.commands["demo"].format_help()
    simulate = parser.commands["simulate"].format_help()
    assert "--duration WALL_SECONDS" in demo and "wall-clock seconds" in demo
    assert "--duration SIM_SECONDS" in simulate and "simulated seconds" in simulate


def test_report_to_a_missing_directory_names_it_and_how_to_fix(log, tmp_path):
    out = tmp_path / "nope" / "r.html"
    proc = run("analyze", str(log), "--format", "html", "-o", str(out))
    assert proc.returncode == 2
    assert last_line(proc.stderr) == (f"sglang-exporter: error: -o {out}: the directory {out.parent} does not exist; "
                                      f"create it (mkdir -p {out.parent}) or name another file")


def test_report_to_a_directory_names_a_file_to_give_instead(log, tmp_path):
    proc = run("analyze", str(log), "--format", "json", "-o", str(tmp_path))
    assert proc.returncode == 2
    assert last_line(proc.stderr) == (f"sglang-exporter: error: -o {tmp_path}: is a directory; name the report "
                                      f"file, e.g. -o {tmp_path / 'report.json'}")


def test_a_missing_log_names_the_path_with_a_hint(tmp_path):
    proc = run("analyze", str(tmp_path / "sglang.log"))
    assert proc.returncode == 2
    assert last_line(proc.stderr) == (f"sglang-exporter: error: {tmp_path / 'sglang.log'}: no such file "
                                      "(check the path; - reads standard input)")


def test_a_directory_given_as_log_names_a_file_in_it(tmp_path):
    proc = run("analyze", str(tmp_path))
    assert proc.returncode == 2
    assert last_line(proc.stderr) == (f"sglang-exporter: error: {tmp_path}: is a directory, not a log file "
                                      f"(name the log in it, e.g. {tmp_path / 'sglang.log'})")


def test_a_missing_config_file_names_where_it_was_given(log, tmp_path):
    proc = run("analyze", str(log), "--config", str(tmp_path / "c.yaml"))
    assert proc.returncode == 2
    assert last_line(proc.stderr) == (f"sglang-exporter: error: {tmp_path / 'c.yaml'}: cannot read config file: "
                                      "No such file or directory (check the path)")


@pytest.fixture
def taken_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def _taken(port: int, where: str, change: str) -> str:
    return (f"sglang-exporter: error: {where} 127.0.0.1:{port}: cannot listen: port {port} is in use (another "
            f"sglang-exporter or demo, or another program: `ss -ltnp 'sport = :{port}'` names it); pick another "
            f"address with {change}, e.g. 127.0.0.1:{port + 1}")


SERVE_CHANGE = "--listen HOST:PORT, SGLANG_EXPORTER_LISTEN or `listen:` in the config file"


def test_a_taken_port_names_the_flag_that_chose_it(log, taken_port):
    proc = run("serve", "--log-file", str(log), "--listen", f"127.0.0.1:{taken_port}")
    assert proc.returncode == 1
    assert last_line(proc.stderr) == _taken(taken_port, "--listen", SERVE_CHANGE)


def test_a_taken_port_names_the_variable_that_chose_it(log, taken_port):
    proc = run("serve", "--log-file", str(log), env={"SGLANG_EXPORTER_LISTEN": f"127.0.0.1:{taken_port}"})
    assert proc.returncode == 1
    assert last_line(proc.stderr) == _taken(taken_port, "SGLANG_EXPORTER_LISTEN", SERVE_CHANGE)


def test_a_taken_port_names_the_config_line_that_chose_it(log, taken_port, tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"profile: online\nlisten: 127.0.0.1:{taken_port}\n")
    proc = run("serve", "--log-file", str(log), "--config", str(config))
    assert proc.returncode == 1
    assert last_line(proc.stderr) == _taken(taken_port, f"{config}:2: listen", SERVE_CHANGE)


def test_the_demo_on_a_taken_default_port_says_what_to_type_under_scripts_demo():
    """Under scripts/demo nobody typed --listen: the message names the default and the command they ran."""
    try:
        blocker = socket.create_server(("127.0.0.1", DEFAULT_PORT))
    except OSError:
        pytest.skip(f"port {DEFAULT_PORT} is taken by something else here")
    with blocker:
        proc = run("demo", "--duration", "1", env={"SGLANG_EXPORTER_PROG": "scripts/demo"})
    assert proc.returncode == 1
    assert last_line(proc.stderr) == _taken(DEFAULT_PORT, "the demo's default address",
                                            "`scripts/demo --listen HOST:PORT`")


def test_generate_into_a_place_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")                       # a file where --out needs a directory
    proc = run("generate", "--out", str(blocker / "out"))
    assert proc.returncode == 1
    line = last_line(proc.stderr)
    assert line.startswith(f"sglang-exporter: error: --out {blocker / 'out'}: cannot write ")
    assert line.endswith("(name a directory you can write to)")


def test_simulate_into_a_missing_directory(tmp_path):
    out = tmp_path / "nope" / "sglang.log"
    proc = run("simulate", "--scenario", "retraction_storm", "--instant", "--log-file", str(out))
    assert proc.returncode == 2
    assert last_line(proc.stderr) == (f"sglang-exporter simulate: error: --log-file {out}: the directory "
                                      f"{out.parent} does not exist; create it (mkdir -p {out.parent}) or name "
                                      "another file")


def test_an_unknown_scenario_points_at_the_list():
    proc = run("simulate", "--scenario", "nope", "--instant")
    assert proc.returncode == 2
    line = last_line(proc.stderr)
    assert line.startswith("sglang-exporter simulate: error: --scenario nope: nope.yaml: no such scenario (known: ")
    assert line.endswith("(simulate --list names the bundled ones)")
