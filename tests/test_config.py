"""Configuration precedence (flags > env > file > defaults) and errors that name file:line and key."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from exporter.cli import main
from exporter.config import Config, ConfigError, build, from_env, load_file


def write(tmp_path, text, name="c.yaml"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_defaults():
    cfg = build({}, environ={})
    assert cfg == Config()
    assert cfg.listen == ":10060" and cfg.profile == "online"
    assert cfg.scrape_interval == 15.0 and cfg.scrape_timeout == 5.0


def test_precedence_flags_env_file_defaults(tmp_path):
    path = write(tmp_path, """\
        profile: online
        scrape_interval: 30
        scrape_timeout: 10
        listen: 127.0.0.1:1111
        log_files: [/var/log/a.log]
        """)
    env = {"SGLANG_EXPORTER_LISTEN": "127.0.0.1:2222", "SGLANG_EXPORTER_SCRAPE_TIMEOUT": "3"}
    cfg = build({"listen": "127.0.0.1:3333"}, environ=env, config_file=path)
    assert cfg.listen == "127.0.0.1:3333"            # flag beats env and file
    assert cfg.scrape_timeout == 3.0                  # env beats file
    assert cfg.profile == "online" and cfg.scrape_interval == 30.0   # file beats defaults
    assert cfg.log_files == ("/var/log/a.log",)
    assert cfg.poll_interval == Config().poll_interval                # default
    cfg = build({"listen": None, "log_files": []}, environ=env, config_file=path)
    assert cfg.listen == "127.0.0.1:2222" and cfg.log_files == ("/var/log/a.log",)   # unset flags ignored


def test_config_file_from_env(tmp_path):
    path = write(tmp_path, "profile: multi-turn\n")
    assert build({}, environ={"SGLANG_EXPORTER_CONFIG": path}).profile == "multi-turn"


def test_env_types():
    env = {"SGLANG_EXPORTER_LOG_FILE": "/a.log,/b/*.log", "SGLANG_EXPORTER_FROM_START": "yes",
           "SGLANG_EXPORTER_SCRAPE_MAX_BYTES": "1000", "SGLANG_EXPORTER_PROFILE": ""}
    out = from_env(env)
    assert out == {"log_files": ("/a.log", "/b/*.log"), "from_start": True, "scrape_max_bytes": 1000}
    with pytest.raises(ConfigError, match="SGLANG_EXPORTER_FROM_START: expected true or false"):
        from_env({"SGLANG_EXPORTER_FROM_START": "maybe"})
    with pytest.raises(ConfigError, match="SGLANG_EXPORTER_SCRAPE_INTERVAL: expected a number"):
        from_env({"SGLANG_EXPORTER_SCRAPE_INTERVAL": "fast"})


def test_a_leading_tilde_in_a_path_setting_is_the_home_directory(tmp_path, monkeypatch):
    """A config file, an environment variable or `--log-file=~/x` reach us with ~ unexpanded (no shell read
    them): the path settings expand it, as a shell would; other settings keep theirs."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "web.yaml").write_text("{}\n")
    path = write(tmp_path, """\
        log_files: ["~/a.log", "/abs/b.log"]
        positions_file: ~/positions.json
        web_config: ~/web.yaml
        """)
    cfg = build({}, environ={}, config_file=path)
    assert cfg.log_files == (f"{tmp_path}/a.log", "/abs/b.log")
    assert cfg.positions_file == f"{tmp_path}/positions.json" and cfg.web_config == f"{tmp_path}/web.yaml"
    assert from_env({"SGLANG_EXPORTER_LOG_FILE": "~/c.log,~/d/*.log"})["log_files"] == (
        f"{tmp_path}/c.log", f"{tmp_path}/d/*.log")
    assert build({"log_files": ["~/e.log"]}, environ={}).log_files == (f"{tmp_path}/e.log",)


def test_signal_overrides(tmp_path):
    path = write(tmp_path, """\
        profile: online
        signals:
          queue_above_range: {max_queue: 500}
          queue_below_range: {enabled: true}
          latency_high: {enabled: false}
        """)
    params = build({}, environ={}, config_file=path).signal_params()
    assert params["queue_above_range"]["max_queue"] == 500
    assert params["queue_below_range"]["min_queue"] == 100      # inactive in online, enabled explicitly
    assert params["latency_high"] is None


@pytest.mark.parametrize("text,line,key,why", [
    ("profile: online\nbogus: 1\n", 2, "bogus", "unknown setting"),
    ("profile: online\n\nscrape_interval: fast\n", 3, "scrape_interval", "expected a number"),
    ("from_start: maybe\n", 1, "from_start", "expected true or false"),
    ("log_files: 5\n", 1, "log_files", "expected a list"),
    ("signals:\n  nope: {}\n", 2, "signals.nope", "unknown signal"),
    ("signals:\n  stalled:\n    stall_seconds: 30\n    stall_minutes: 1\n", 4, "signals.stalled.stall_minutes",
     "unknown parameter"),
    ("signals:\n  stalled:\n    stall_seconds: soon\n", 3, "signals.stalled.stall_seconds",
     "expected a non-negative number"),
    ("signals:\n  stalled:\n    enabled: 1\n", 3, "signals.stalled.enabled", "expected true or false"),
    ("signals:\n  queue_above_range:\n    min_samples: 0\n", 3, "signals.queue_above_range.min_samples",
     "expected a whole number of at least 1"),
    ("signals:\n  startup_regression:\n    history: 2.5\n", 3, "signals.startup_regression.history",
     "expected a whole number of at least 1"),
    ("scrape_interval: 10\nscrape_timeout: 10\n", 2, "scrape_timeout", "must be below scrape_interval"),
    ("scrape_timeout: 20\n", 1, "scrape_timeout", "must be below scrape_interval"),
    ("profile: batchy\n", 1, "profile", "unknown profile"),
    ("listen: nowhere\n", 1, "listen", "expected HOST:PORT"),
    ("sglang_url: localhost:30000\n", 1, "sglang_url", "expected http"),
])
def test_errors_name_file_line_and_key(tmp_path, text, line, key, why):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        build({}, environ={}, config_file=path)
    msg = str(exc.value)
    assert msg.startswith(f"{path}:{line}: {key}"), msg
    assert why in msg


def test_invalid_yaml_names_line(tmp_path):
    path = write(tmp_path, "profile: online\nsignals: [unclosed\n")
    with pytest.raises(ConfigError, match=rf"^{path}:\d+: not valid YAML"):
        load_file(path)


def test_missing_file():
    with pytest.raises(ConfigError, match="cannot read config file"):
        build({}, environ={}, config_file="/nonexistent/c.yaml")


def test_flag_and_env_errors_name_them():
    with pytest.raises(ConfigError, match="^--listen: expected HOST:PORT"):
        build({"listen": "nope"}, environ={})
    with pytest.raises(ConfigError, match="^SGLANG_EXPORTER_SCRAPE_TIMEOUT: scrape_timeout"):
        build({}, environ={"SGLANG_EXPORTER_SCRAPE_TIMEOUT": "30"})
    with pytest.raises(ConfigError, match="^--scrape-interval: must be positive"):
        build({"scrape_interval": 0}, environ={})


def test_check_config_cli(tmp_path, capsys):
    good = write(tmp_path, "profile: online\nlog_files: [/x.log]\n", "good.yaml")
    assert main(["check-config", good]) == 0
    assert "ok (profile online" in capsys.readouterr().out
    bad = write(tmp_path, "profile: online\nscrape_timeot: 3\n", "bad.yaml")
    assert main(["check-config", bad]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: scrape_timeot: unknown setting" in err


def test_check_config_subprocess_exit_code(tmp_path):
    bad = write(tmp_path, "signals:\n  retraction_storm:\n    per_min: 3\n")
    proc = subprocess.run([sys.executable, "-m", "exporter", "check-config", bad], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2
    assert f"{bad}:3: signals.retraction_storm.per_min: unknown parameter" in proc.stderr


def test_configuration_doc_covers_every_setting():
    from pathlib import Path

    from exporter.config.scalars import _SCALARS, ENV_PREFIX
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    for key, (_, env) in _SCALARS.items():
        assert f"`{key}`" in doc, key
        assert ENV_PREFIX + env in doc, env
    assert "SGLANG_EXPORTER_CONFIG" in doc and "signals" in doc


def test_every_mistake_of_a_file_is_reported_in_file_order(tmp_path, capsys):
    path = write(tmp_path, """\
        scrape_timeout: 20
        bogus: 1
        signals:
          nope: {}
          stalled: {stall_seconds: soon, stall_minutes: 1}
        alerts:
          for: {SGLangNope: 1m}
          max_unknown_ratio: 3
        profile: batchy
        """)
    assert main(["check-config", path]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    lines[0] = lines[0].removeprefix("sglang-exporter: error: ")
    expected = [(1, "scrape_timeout", "must be below scrape_interval"), (2, "bogus", "unknown setting"),
                (4, "signals.nope", "unknown signal"), (5, "signals.stalled.stall_seconds", "non-negative number"),
                (5, "signals.stalled.stall_minutes", "unknown parameter"), (7, "alerts.for.SGLangNope", "unknown alert"),
                (8, "alerts.max_unknown_ratio", "between 0 and 1"), (9, "profile", "unknown profile")]
    assert len(lines) == len(expected), lines
    for line, (number, key, why) in zip(lines, expected):
        assert line.startswith(f"{path}:{number}: {key}") and why in line, line


def test_alerts_section_reaches_the_generator(tmp_path):
    from exporter.generate.settings import RuleSettings
    path = write(tmp_path, """\
        signals:
          retraction_storm: {per_minute: 20}
        alerts:
          sglang_selector: 'job="llm"'
          join_labels: [cluster, instance]
          for: {SGLangRetractionStorm: 5m}
          short_windows: yes
        """)
    cfg = build({}, environ={}, config_file=path)
    assert cfg.alerts.sglang_selector == 'job="llm"' and cfg.alerts.join_labels == ("cluster", "instance")
    settings = RuleSettings(cfg)
    assert settings.thresholds_in_force("retraction_storm")["per_minute"] == 20
    assert settings.alert_for["SGLangRetractionStorm"] == "5m" and settings.for_duration("SGLangRetractionStorm") == "10s"


def test_configuration_doc_covers_every_alerts_key():
    from pathlib import Path

    from exporter.config.file import _ALERT_KEYS
    doc = (Path(__file__).parent.parent / "docs" / "configuration.md").read_text()
    section = doc.split("## `alerts`")[1].split("\n## ")[0]
    for key in _ALERT_KEYS:
        assert f"`{key}`" in section, key
