"""Command line: serve, parse, analyze, check-config, generate, simulate, demo.

Exit codes: 0 ok, 2 usage or configuration error (the message names the flag, file or key), 1 runtime failure.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from importlib import import_module

from exporter import __version__
from exporter.catalog import PROFILES
from exporter.config import DEFAULT_PORT, ConfigError, build
from exporter.logging_setup import FORMATS as LOG_FORMATS
from exporter.logging_setup import LEVELS as LOG_LEVELS
from exporter.logging_setup import configure as configure_logging

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2
log = logging.getLogger(__name__)


def _err(msg: str) -> None:
    print(f"sglang-exporter: error: {msg}", file=sys.stderr)


def _check_input(path: str) -> str | None:
    """Why `path` cannot be read as a log, or None."""
    if path == "-":
        return None
    if not os.path.exists(path):
        return f"{path}: no such file"
    if os.path.isdir(path):
        return f"{path}: is a directory, not a log file"
    if not os.access(path, os.R_OK):
        return f"{path}: permission denied"
    try:
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    if b"\x00" in head:
        return f"{path}: binary data, not a text log"
    return None


def cmd_parse(args) -> int:
    from exporter.ingest.events import JsonLines
    from exporter.ingest.pipeline import SourceParser, iter_file_item_lists, layouts_read
    for path in args.files:
        problem = _check_input(path)
        if problem:
            _err(problem)
            return EXIT_USAGE
    out = sys.stdout
    dumps = JsonLines()
    stats = []
    try:
        for path in args.files:
            sp = SourceParser(path)
            stats.append(sp)
            write, row = out.write, dumps.row
            for items in iter_file_item_lists(path, args.max_line_bytes, stats=sp):
                if items:       # one write per block of lines; a learned batch line is written from its row
                    write("\n".join([row(i) if i.__class__ is tuple else dumps(i) for i in items]))
                    write("\n")
    except BrokenPipeError:
        sys.stderr.close()
        return EXIT_OK
    kinds: dict = {}
    unparsed: dict = {}
    for sp in stats:
        for reason, n in sp.parser.unparsed.items():
            unparsed[reason] = unparsed.get(reason, 0) + n
    recognised = sum(sp.parser.recognised for sp in stats)
    lines = sum(sp.lines for sp in stats)
    if args.stats:
        # stdout stays valid JSON Lines; the summary goes to stderr
        for sp in stats:
            for kind, n in sp.parser.kinds.items():
                kinds[kind] = kinds.get(kind, 0) + n
        summary = {"lines": lines, "records": recognised, "kinds": dict(sorted(kinds.items())),
                   "unparsed": dict(sorted(unparsed.items())),
                   **layouts_read(stats),
                   "format_family": next((sp.parser.format_family for sp in stats if sp.parser.format_family),
                                         None)}
        print(json.dumps(summary, indent=1), file=sys.stderr)
    if lines and not recognised:
        _err(f"{', '.join(args.files)}: no SGLang log record found in {lines} lines (not an SGLang log?): "
             f"{_why_not(stats)}")
        return EXIT_RUNTIME
    return EXIT_OK


def _summed(counters) -> dict:
    total: dict = {}
    for c in counters:
        for k, n in c.items():
            total[k] = total.get(k, 0) + n
    return total


def _why_not(stats) -> str:
    """What the lines of a log without any SGLang message were, most frequent first."""
    seen = _summed(sp.parser.skipped for sp in stats)
    rest = {k: n for k, n in _summed(sp.parser.unparsed for sp in stats).items() if k != "no_sglang_prefix"}
    parts = [f"{n} {k.replace('_', ' ')}" for k, n in sorted({**seen, **rest}.items(), key=lambda kv: -kv[1])]
    return "no line holds a message SGLang prints; lines seen: " + (", ".join(parts[:6]) or "none")



def _config(args, **extra):
    flags = {"profile": getattr(args, "profile", None), **extra}
    return build(flags, config_file=getattr(args, "config", None))


def cmd_analyze(args) -> int:
    from exporter.analyze import analyze
    from exporter.analyze_text import render_text
    for path in args.files:
        problem = _check_input(path)
        if problem:
            _err(problem)
            return EXIT_USAGE
    cfg = _config(args)
    report = analyze(args.files, cfg, progress=None if not args.quiet else False, series=args.format == "html")
    if report["lines"]["read"] and not report["lines"]["recognised"]:
        seen = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in list(report["layouts"]["skipped"].items())[:6])
        _err(f"{', '.join(args.files)}: no SGLang log record found (not an SGLang log?): no line holds a message "
             f"SGLang prints; lines seen: {seen or 'none'}")
        return EXIT_RUNTIME
    if args.format == "json":
        text = json.dumps(report, indent=1, default=str) + "\n"
    elif args.format == "html":
        try:
            from exporter.report_html import render_html
        except ImportError:
            _err("--format html needs the report module (exporter/report_html.py)")
            return EXIT_RUNTIME
        text = render_html(report)
    else:
        text = render_text(report)
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_check_config(args) -> int:
    """Every mistake of the file is reported, in file order (one per line)."""
    from exporter.server import load_web_config
    cfg = build({}, environ={}, config_file=args.file)
    load_web_config(cfg.web_config)
    params = cfg.signal_params()
    active = [sid for sid, p in params.items() if p]
    objectives = ", ".join(cfg.slo) or "none"
    print(f"{args.file}: ok (profile {cfg.profile}; {len(active)} signals active; objectives: {objectives}; "
          f"logs: {', '.join(cfg.log_files) or 'none'}; sglang_url: {cfg.sglang_url or 'none'})")
    return EXIT_OK


def cmd_serve(args) -> int:
    from exporter.server import load_web_config, make_server, serve_in_thread
    from exporter.sidecar import Sidecar
    cfg = _config(args, log_files=args.log_file, from_start=True if args.from_start else None,
                  from_end=True if args.from_end else None, positions_file=args.positions_file,
                  sglang_url=args.sglang_url, listen=args.listen, web_config=args.web_config,
                  scrape_interval=args.scrape_interval, scrape_timeout=args.scrape_timeout)
    if not cfg.log_files and not cfg.sglang_url:
        raise ConfigError("nothing to watch: give --log-file and/or --sglang-url "
                          "(or try `sglang-exporter demo`)")
    web = load_web_config(cfg.web_config)
    host, port = cfg.listen_host_port
    # the sidecar's own log (stderr): one line per source going down or up, rotations, positions, worker errors
    configure_logging(_log_setting(args.log_level, "--log-level", LOG_LEVELS, "info"),
                      _log_setting(args.log_format, "--log-format", LOG_FORMATS, "text"))
    sidecar = Sidecar(cfg)
    try:
        server = make_server(sidecar, host, port, web)
    except OSError as exc:
        _err(f"--listen {cfg.listen}: cannot listen: {exc.strerror or exc}")
        return EXIT_RUNTIME
    done = threading.Event()

    def stop(signum, frame):
        done.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # the port is bound (a taken port fails above, before any work) but answers only once every log is joined
    # and its history replayed: a line written after /metrics first answers can never be taken for old content
    sidecar.start()
    serve_in_thread(server)
    scheme = "https" if web.get("tls") else "http"
    log.info("sglang-exporter %s: serving %s://%s:%d/metrics (profile %s; logs: %s; sglang: %s)", __version__,
             scheme, host, server.server_address[1], cfg.profile, ", ".join(cfg.log_files) or "none",
             cfg.sglang_url or "none")
    done.wait()
    server.shutdown()
    server.server_close()
    sidecar.shutdown()
    return EXIT_OK


def _log_setting(flag: str | None, name: str, known: tuple, default: str) -> str:
    """A logging flag's value: the flag, else its environment twin, else `default`."""
    env = "SGLANG_EXPORTER_" + name[2:].upper().replace("-", "_")
    value = flag or os.environ.get(env) or default
    if value not in known:
        raise ConfigError(f"{env}: {value!r} is not one of {', '.join(known)}")
    return value


def cmd_generate(args) -> int:
    """Every generated file (alerts, promtool tests, runbooks, dashboards, manifests, docs) from the catalog and
    the configuration, written under --out (default: this checkout); --check writes nothing and names the stale."""
    from pathlib import Path

    from exporter import generate
    cfg = build({}, environ={}, config_file=args.config) if args.config else build({}, environ={})
    if args.out:
        root = Path(args.out)
    else:
        here = Path(__file__).resolve().parent.parent
        root = here if (here / "pyproject.toml").is_file() else Path.cwd()
    files = generate.render(cfg)
    if args.check:
        stale = generate.stale(files, root)
        for rel in stale:
            print(f"stale: {rel}", file=sys.stderr)
        if stale:
            _err("generated files are stale; run `sglang-exporter generate` and commit the result")
            return EXIT_RUNTIME
        print(f"{len(files)} generated files are fresh")
        return EXIT_OK
    for rel in generate.write(files, root):
        print(f"wrote {rel}" if rel in files else f"removed {rel}")
    return EXIT_OK


def cmd_demo(args) -> int:
    from exporter.demo import run_demo
    return run_demo(args)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command; `command`, when known, is the one about to run (see `simulate` below)."""
    p = argparse.ArgumentParser(prog="sglang-exporter", description="Health signals, tuning advice, alerts and "
                                "dashboards for SGLang servers, from their logs and /metrics.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def common(sp):
        sp.add_argument("--profile", choices=list(PROFILES), default=None,
                        help="workload profile (env SGLANG_EXPORTER_PROFILE; default offline)")
        sp.add_argument("--config", metavar="FILE", help="YAML config file (env SGLANG_EXPORTER_CONFIG)")

    s = sub.add_parser("serve", help="run the sidecar: follow logs, scrape SGLang, serve /metrics")
    common(s)
    s.add_argument("--log-file", action="append", metavar="PATH",
                   help="SGLang log file or glob; repeatable (env SGLANG_EXPORTER_LOG_FILE, comma-separated)")
    s.add_argument("--from-start", action="store_true", help="replay all existing log content, on the log's own "
                   "clock (env SGLANG_EXPORTER_FROM_START); default: replay from the latest SGLang start-up")
    s.add_argument("--from-end", action="store_true", help="replay nothing: start at the end of existing logs "
                   "(env SGLANG_EXPORTER_FROM_END)")
    s.add_argument("--positions-file", metavar="FILE", help="where read positions and counters survive a restart "
                   "of the sidecar (env SGLANG_EXPORTER_POSITIONS_FILE; default: none)")
    s.add_argument("--sglang-url", metavar="URL", help="SGLang base URL; its /metrics is scraped "
                   "(env SGLANG_EXPORTER_SGLANG_URL)")
    s.add_argument("--listen", metavar="HOST:PORT", help=f"listen address (env SGLANG_EXPORTER_LISTEN; "
                   f"default 0.0.0.0:{DEFAULT_PORT})")
    s.add_argument("--web-config", metavar="FILE", help="TLS / basic auth file (env SGLANG_EXPORTER_WEB_CONFIG)")
    s.add_argument("--scrape-interval", type=float, metavar="S", help="seconds between scrapes of SGLang (15)")
    s.add_argument("--scrape-timeout", type=float, metavar="S", help="scrape timeout, below the interval (5)")
    s.add_argument("--log-level", choices=LOG_LEVELS, help="least severe record of the exporter's own log on "
                   "stderr (env SGLANG_EXPORTER_LOG_LEVEL; default info)")
    s.add_argument("--log-format", choices=LOG_FORMATS, help="text, or json: one JSON object per line for log "
                   "pipelines (env SGLANG_EXPORTER_LOG_FORMAT; default text)")
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser("parse", help="print one JSON object per recognised SGLang log record (JSON Lines)")
    s.add_argument("files", nargs="+", metavar="FILE", help="log files (plain, CRI or Docker json); - for stdin")
    s.add_argument("--stats", action="store_true", help="also print counts per kind and unparsed lines by "
                   "reason (to stderr)")
    s.add_argument("--max-line-bytes", type=int, default=1 << 20, help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_parse)

    s = sub.add_parser("analyze", help="replay a log and report each signal over time with advice")
    common(s)
    s.add_argument("files", nargs="+", metavar="FILE")
    s.add_argument("--format", choices=("text", "json", "html"), default="text")
    s.add_argument("-o", "--output", metavar="FILE", help="write the report here instead of stdout")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress meter")
    s.set_defaults(func=cmd_analyze)

    s = sub.add_parser("check-config", help="validate a YAML config file")
    s.add_argument("file", metavar="FILE")
    s.set_defaults(func=cmd_check_config)

    s = sub.add_parser("generate", help="regenerate alerts, runbooks, dashboards, manifests and docs from the "
                       "signal catalog")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 and name the stale files")
    s.add_argument("--config", metavar="FILE", help="YAML config file (its `signals:` thresholds, `slo:` "
                   "objectives and `alerts:` settings; default: the built-in defaults the committed files use)")
    s.add_argument("--out", metavar="DIR", help="root to write under (default: this checkout)")
    s.set_defaults(func=cmd_generate)

    try:
        # the simulator's arguments need its package, a third of the start-up of `analyze` (which never uses
        # it): another command gets the name only
        simulate = import_module("exporter.simulate") if command in (None, "simulate") else None
        s = sub.add_parser("simulate", help="an SGLang stand-in: writes logs and serves /metrics for a scenario")
        if simulate is not None:
            simulate.add_arguments(s)
            s.set_defaults(func=simulate.main)
    except ImportError:
        pass

    s = sub.add_parser("demo", help="simulated SGLang + the sidecar, to see signals change without a GPU")
    s.add_argument("--scenario", default="retraction_storm", help="scenario to simulate (see simulate --list)")
    s.add_argument("--listen", default=f"127.0.0.1:{DEFAULT_PORT}", metavar="HOST:PORT")
    s.add_argument("--speed", type=float, default=10.0, help="simulated seconds per real second")
    s.add_argument("--duration", type=float, default=None, help="stop after this many real seconds")
    s.set_defaults(func=cmd_demo)
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_RUNTIME


if __name__ == "__main__":
    raise SystemExit(main())
