"""Command line: serve, parse, analyze, check-config, generate, simulate, healthcheck, demo.

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
from exporter.catalog import DEFAULT_PROFILE, PROFILES
from exporter.cli.logging_setup import FORMATS as LOG_FORMATS
from exporter.cli.logging_setup import LEVELS as LOG_LEVELS
from exporter.cli.logging_setup import configure as configure_logging
from exporter.config import DEFAULT_PORT, ConfigError, build, cannot_listen

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2
log = logging.getLogger(__name__)


def _err(msg: str) -> None:
    print(f"sglang-exporter: error: {msg}", file=sys.stderr)


def _check_input(path: str) -> str | None:
    """Why `path` cannot be read as a log, or None."""
    if path == "-":
        return None
    if not os.path.exists(path):
        return f"{path}: no such file (check the path; - reads standard input)"
    if os.path.isdir(path):
        return f"{path}: is a directory, not a log file (name the log in it, e.g. {os.path.join(path, 'sglang.log')})"
    if not os.access(path, os.R_OK):
        return f"{path}: permission denied (run as a user who can read it, or copy it somewhere readable)"
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



def _check_output(path: str | None, fmt: str) -> str | None:
    """Why the report cannot be written to `path` (-o), or None; checked before a replay that may take minutes."""
    if not path or path == "-":
        return None
    example = os.path.join(path, f"report.{'txt' if fmt == 'text' else fmt}")
    if os.path.isdir(path):
        return f"-o {path}: is a directory; name the report file, e.g. -o {example}"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"-o {path}: the directory {folder} does not exist; create it (mkdir -p {folder}) or name another file"
    if not os.access(folder if not os.path.exists(path) else path, os.W_OK):
        return f"-o {path}: permission denied; name a file in a directory you can write to"
    return None


def _config(args, origins: dict | None = None, **extra):
    flags = {"profile": getattr(args, "profile", None), **extra}
    return build(flags, config_file=getattr(args, "config", None), origins=origins)


def cmd_analyze(args) -> int:
    from exporter.report.analyze import analyze
    from exporter.report.text import render_text
    for path in args.files:
        problem = _check_input(path)
        if problem:
            _err(problem)
            return EXIT_USAGE
    problem = _check_output(args.output, args.format)
    if problem:
        _err(problem)
        return EXIT_USAGE
    origins: dict = {}
    cfg = _config(args, origins)
    report = analyze(args.files, cfg, progress=None if not args.quiet else False, series=args.format == "html",
                     profile_default="profile" not in origins)
    if report["lines"]["read"] and not report["lines"]["recognised"]:
        seen = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in list(report["layouts"]["skipped"].items())[:6])
        _err(f"{', '.join(args.files)}: no SGLang log record found (not an SGLang log?): no line holds a message "
             f"SGLang prints; lines seen: {seen or 'none'}")
        return EXIT_RUNTIME
    if args.format == "json":
        text = json.dumps(report, indent=1, default=str) + "\n"
    elif args.format == "html":
        try:
            from exporter.report.html import render_html
        except ImportError:
            _err("--format html needs the report module (exporter/report/html.py)")
            return EXIT_RUNTIME
        text = render_html(report)
    else:
        text = render_text(report)
    if args.output and args.output != "-":
        try:
            with open(args.output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:       # checked before the replay; the disk may still fill or the folder go
            _err(f"-o {args.output}: cannot write the report: {exc.strerror or exc}")
            return EXIT_RUNTIME
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def cmd_check_config(args) -> int:
    """Every mistake of the file is reported, in file order (one per line)."""
    from exporter.web.server import load_web_config
    cfg = build({}, environ={}, config_file=args.file)
    load_web_config(cfg.web_config)
    params = cfg.signal_params()
    active = [sid for sid, p in params.items() if p]
    objectives = ", ".join(cfg.slo) or "none"
    print(f"{args.file}: ok (profile {cfg.profile}; {len(active)} signals active; objectives: {objectives}; "
          f"logs: {', '.join(cfg.log_files) or 'none'}; sglang_url: {cfg.sglang_url or 'none'})")
    return EXIT_OK


def serve_config(args, environ=os.environ, origins: dict | None = None):
    """The configuration `serve` runs with: its flags over `environ` over its config file over the defaults.
    `healthcheck` resolves the listen address of a running serve through this same function."""
    flags = {"profile": args.profile, "log_files": args.log_file,
             "from_start": True if args.from_start else None, "from_end": True if args.from_end else None,
             "positions_file": args.positions_file, "sglang_url": args.sglang_url, "listen": args.listen,
             "web_config": args.web_config, "scrape_interval": args.scrape_interval,
             "scrape_timeout": args.scrape_timeout}
    return build(flags, environ=environ, config_file=args.config, origins=origins)


def cmd_serve(args) -> int:
    from exporter.sidecar.run import Sidecar
    from exporter.web.server import load_web_config, make_server, serve_in_thread
    origins: dict = {}
    cfg = serve_config(args, origins=origins)
    if not cfg.log_files and not cfg.sglang_url:
        raise ConfigError("nothing to watch: give --log-file and/or --sglang-url "
                          "(or try `sglang-exporter demo`)")
    web = load_web_config(cfg.web_config)
    host, port = cfg.listen_host_port
    # the sidecar's own log (stderr): one line per source going down or up, rotations, positions, worker errors
    configure_logging(_log_setting(args.log_level, "--log-level", LOG_LEVELS, "info"),
                      _log_setting(args.log_format, "--log-format", LOG_FORMATS, "text"))
    sidecar = Sidecar(cfg)
    sidecar.claim_positions()      # a second sidecar on one positions file stops here: exit 2, naming the holder
    try:
        server = make_server(sidecar, host, port, web)
    except OSError as exc:
        where = origins.get("listen", "the default listen address")
        _err(cannot_listen(cfg.listen, where, exc, "--listen HOST:PORT, SGLANG_EXPORTER_LISTEN or `listen:` in "
                           "the config file"))
        return EXIT_RUNTIME
    done = threading.Event()

    def stop(signum, frame):
        if signum == signal.SIGHUP:
            # a clean stop, not a reload: the configuration is read once, at start; whoever runs us (Kubernetes,
            # systemd with Restart=always) starts a new sidecar, which reads it again and resumes from the
            # positions file
            log.warning("received SIGHUP: stopping cleanly (positions saved); the configuration is not reloaded "
                        "in place, start sglang-exporter again to apply it")
        else:
            log.info("received %s: stopping", signal.Signals(signum).name)
        done.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, stop)
    # the port is bound (a taken port fails above, before any work) but answers only once every log is joined
    # and its history replayed: a line written after /metrics first answers can never be taken for old content
    sidecar.start()
    serve_in_thread(server)
    scheme = "https" if web.get("tls") else "http"
    log.info("sglang-exporter %s: serving %s://%s:%d/metrics (profile %s%s; logs: %s; sglang: %s)", __version__,
             scheme, host, server.server_address[1], cfg.profile,
             "" if "profile" in origins else ", the default", ", ".join(cfg.log_files) or "none",
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
    try:
        touched = generate.write(files, root)
    except OSError as exc:
        _err(f"--out {root}: cannot write {exc.filename or root}: {exc.strerror or exc} (name a directory you "
             "can write to)")
        return EXIT_RUNTIME
    for rel in touched:
        print(f"wrote {rel}" if rel in files else f"removed {rel}")
    return EXIT_OK


def cmd_healthcheck(args) -> int:
    from exporter.cli.healthcheck import run
    return run(args.pid, args.timeout)


def cmd_demo(args) -> int:
    from exporter.cli.demo import run_demo
    return run_demo(args)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help, with an option's default after its help unless the help already says it or there is
    none to say (a flag, or a setting whose default lives in the configuration)."""

    def _get_help_string(self, action):
        text = action.help or ""
        if (not action.option_strings or action.default in (None, False, argparse.SUPPRESS)
                or "default" in text):
            return text
        return text + " (default %(default)s)"


class _Parser(argparse.ArgumentParser):
    """No abbreviations (`--log-fil` is a mistake, not `--log-file`), defaults shown; `commands` holds the
    subcommands' parsers, whose usage an error about their arguments shows (see `parse`)."""

    def __init__(self, **kw):
        super().__init__(allow_abbrev=False, formatter_class=_HelpFormatter, **kw)
        self.commands: dict[str, argparse.ArgumentParser] = {}


def build_parser(command: str | None = None) -> _Parser:
    """The parser of every command; `command`, when known, is the one about to run (see `simulate` below)."""
    p = _Parser(prog="sglang-exporter", description="Health signals, tuning advice, alerts and "
                "dashboards for SGLang servers, from their logs and /metrics.")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def command_parser(name: str, summary: str) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".")
        p.commands[name] = sp
        return sp

    def common(sp):
        sp.add_argument("--profile", choices=list(PROFILES), default=None,
                        help=f"workload profile: which signals judge and their thresholds (env "
                             f"SGLANG_EXPORTER_PROFILE; default {DEFAULT_PROFILE}; offline for batch jobs)")
        sp.add_argument("--config", metavar="FILE", help="YAML config file (env SGLANG_EXPORTER_CONFIG)")

    s = command_parser("serve", "run the sidecar: follow SGLang's logs, scrape its /metrics, serve ours")
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
    s.add_argument("--scrape-interval", type=float, metavar="SECONDS", help="seconds between scrapes of SGLang's "
                   "/metrics (env SGLANG_EXPORTER_SCRAPE_INTERVAL; default 15)")
    s.add_argument("--scrape-timeout", type=float, metavar="SECONDS", help="seconds a scrape may take, below "
                   "the interval (env SGLANG_EXPORTER_SCRAPE_TIMEOUT; default 5)")
    s.add_argument("--log-level", choices=LOG_LEVELS, help="least severe record of the exporter's own log on "
                   "stderr (env SGLANG_EXPORTER_LOG_LEVEL; default info)")
    s.add_argument("--log-format", choices=LOG_FORMATS, help="text, or json: one JSON object per line for log "
                   "pipelines (env SGLANG_EXPORTER_LOG_FORMAT; default text)")
    s.set_defaults(func=cmd_serve)

    s = command_parser("parse", "print one JSON object per recognised SGLang log record (JSON Lines)")
    s.add_argument("files", nargs="+", metavar="FILE", help="SGLang log files (plain, CRI or Docker json); "
                   "- reads standard input")
    s.add_argument("--stats", action="store_true", help="also print counts per kind and unparsed lines by "
                   "reason (to stderr)")
    s.add_argument("--max-line-bytes", type=int, default=1 << 20, help=argparse.SUPPRESS)
    s.set_defaults(func=cmd_parse)

    s = command_parser("analyze", "replay a log and report each signal over time, with advice")
    common(s)
    s.add_argument("files", nargs="+", metavar="FILE", help="SGLang log files (plain, CRI or Docker json), "
                   "read in this order; - reads standard input")
    s.add_argument("--format", choices=("text", "json", "html"), default="text",
                   help="text for people, json for tools (docs/analyze.md), html: one file with charts")
    s.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (default: standard output)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress meter")
    s.set_defaults(func=cmd_analyze)

    s = command_parser("check-config", "validate a YAML config file and say what it sets")
    s.add_argument("file", metavar="FILE", help="the YAML config file (docs/configuration.md)")
    s.set_defaults(func=cmd_check_config)

    s = command_parser("generate", "regenerate alerts, runbooks, dashboards, manifests and docs from the "
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
        s = command_parser("simulate", "an SGLang stand-in: writes a scenario's log and serves its /metrics")
        if simulate is not None:
            simulate.add_arguments(s)
            s.set_defaults(func=simulate.main)
    except ImportError:
        pass

    s = command_parser("healthcheck", "exit 0 when the running `serve` answers /healthz at the address it "
                       "was configured with (flag, environment or config file); the image's HEALTHCHECK")
    s.add_argument("--pid", type=int, metavar="PID", help="the serve process (default: PID 1 if it is serve, "
                   "else the first serve process found)")
    s.add_argument("--timeout", type=float, default=4.0, metavar="SECONDS", help="HTTP timeout of the probe")
    s.set_defaults(func=cmd_healthcheck)

    s = command_parser("demo", "a simulated SGLang and the sidecar, to see signals change without a GPU")
    s.add_argument("--scenario", default="retraction_storm", metavar="NAME",
                   help="scenario to simulate (simulate --list names them)")
    s.add_argument("--listen", metavar="HOST:PORT", help=f"where the sidecar serves /metrics, the API and its "
                   f"pages (default 127.0.0.1:{DEFAULT_PORT})")
    s.add_argument("--speed", type=float, default=10.0, metavar="X", help="simulated seconds per wall-clock second")
    s.add_argument("--duration", type=float, default=None, metavar="WALL_SECONDS",
                   help="stop after this many wall-clock seconds (default: run until Ctrl-C)")
    s.add_argument("--profile", choices=list(PROFILES), default=None,
                   help=f"workload profile the sidecar judges by (default: the scenario's own, else {DEFAULT_PROFILE})")
    s.set_defaults(func=cmd_demo)
    return p


def parse(parser: _Parser, argv: list[str]) -> argparse.Namespace:
    """`parser.parse_args(argv)`, except that an argument no command knows is reported by the command it was
    given to, with that command's usage (argparse reports it with the top-level usage) and the option meant."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        import difflib  # only for a mistake: start-up stays cheap (tests/test_cli_startup.py)
        here = parser.commands.get(args.command)
        if here is None:
            parser.error("unrecognized arguments: " + " ".join(extra))
        hints = []
        for word in extra:
            option = word.split("=", 1)[0]
            if not option.startswith("-"):
                continue
            close = difflib.get_close_matches(option, list(here._option_string_actions), n=1, cutoff=0.6)
            owners = [name for name, sp in parser.commands.items() if option in sp._option_string_actions]
            if close:
                hints.append(f"did you mean {close[0]}?")
            elif owners:
                hints.append(f"{option} is an option of {' and '.join(owners)}, not of {args.command}")
        here.error("unrecognized arguments: " + " ".join(extra) + (f" ({'; '.join(hints)})" if hints else ""))
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    word = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(word)
    if word is not None and word not in parser.commands and not any(a in ("-h", "--help", "--version")
                                                                      for a in argv[:argv.index(word)]):
        import difflib
        close = difflib.get_close_matches(word, list(parser.commands), n=1)
        parser.error(f"unknown command {word!r}" + (f" (did you mean {close[0]}?)" if close else "")
                     + f"; commands: {', '.join(parser.commands)}")
    args = parse(parser, argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_RUNTIME


if __name__ == "__main__":
    raise SystemExit(main())
