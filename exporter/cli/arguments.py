"""The command line's grammar: every command and its flags (argparse), mistakes reported by the command they were
given to, and serve's flags read into its Config (healthcheck reads a running serve's the same way)."""
from __future__ import annotations

import argparse
import os
from importlib import import_module

from exporter import __version__
from exporter.catalog import DEFAULT_PROFILE, PROFILES
from exporter.cli.logging_setup import FORMATS as LOG_FORMATS
from exporter.cli.logging_setup import LEVELS as LOG_LEVELS
from exporter.config import DEFAULT_PORT, build


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
                   help="SGLang log file or glob (rotated copies a glob matches are read as part of their live "
                        "file); repeatable (env SGLANG_EXPORTER_LOG_FILE, comma-separated)")
    s.add_argument("--from-start", action="store_true", help="replay all existing log content, on the log's own "
                   "clock (env SGLANG_EXPORTER_FROM_START); default: replay from the latest SGLang start-up")
    s.add_argument("--from-end", action="store_true", help="replay nothing: start at the end of existing logs "
                   "(env SGLANG_EXPORTER_FROM_END)")
    s.add_argument("--positions-file", metavar="FILE", help="where read positions and counters survive a restart "
                   "of the sidecar (env SGLANG_EXPORTER_POSITIONS_FILE; default: none)")
    s.add_argument("--sglang-url", metavar="URL", help="SGLang base URL; its /metrics is scraped "
                   "(env SGLANG_EXPORTER_SGLANG_URL)")
    s.add_argument("--listen", metavar="HOST:PORT", help=f"listen address (env SGLANG_EXPORTER_LISTEN; "
                   f"default :{DEFAULT_PORT}, every address: IPv6 and IPv4; 0.0.0.0:PORT for IPv4 only)")
    s.add_argument("--web-config", metavar="FILE", help="TLS / basic auth file (env SGLANG_EXPORTER_WEB_CONFIG)")
    s.add_argument("--scrape-interval", type=float, metavar="SECONDS", help="seconds between scrapes of SGLang's "
                   "/metrics (env SGLANG_EXPORTER_SCRAPE_INTERVAL; default 15)")
    s.add_argument("--scrape-timeout", type=float, metavar="SECONDS", help="seconds a scrape may take, below "
                   "the interval (env SGLANG_EXPORTER_SCRAPE_TIMEOUT; default 5)")
    s.add_argument("--log-level", choices=LOG_LEVELS, help="least severe record of the exporter's own log on "
                   "stderr (env SGLANG_EXPORTER_LOG_LEVEL; default info)")
    s.add_argument("--log-format", choices=LOG_FORMATS, help="text, or json: one JSON object per line for log "
                   "pipelines (env SGLANG_EXPORTER_LOG_FORMAT; default text)")

    s = command_parser("parse", "print one JSON object per recognised SGLang log record (JSON Lines)")
    s.add_argument("files", nargs="+", metavar="FILE", help="SGLang log files (plain, CRI or Docker json); "
                   "- reads standard input")
    s.add_argument("--stats", action="store_true", help="also print counts per kind and unparsed lines by "
                   "reason (to stderr)")
    s.add_argument("--max-line-bytes", type=int, default=1 << 20, help=argparse.SUPPRESS)

    s = command_parser("analyze", "replay a log and report each signal over time, with advice")
    common(s)
    s.add_argument("files", nargs="+", metavar="FILE", help="SGLang log files (plain, CRI or Docker json), "
                   "read in this order (a file's rotated copies just before it, oldest first); - reads standard input")
    s.add_argument("--format", choices=("text", "json", "html"), default="text",
                   help="text for people, json for tools (docs/analyze.md), html: one file with charts")
    s.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (default: standard output)")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress meter")

    s = command_parser("check-config", "validate a YAML config file and say what it sets")
    s.add_argument("file", metavar="FILE", help="the YAML config file (docs/configuration.md)")

    s = command_parser("generate", "regenerate alerts, runbooks, dashboards, manifests and docs from the "
                       "signal catalog")
    s.add_argument("--check", action="store_true", help="write nothing; exit 1 and name the stale files")
    s.add_argument("--config", metavar="FILE", help="YAML config file (its `signals:` thresholds, `slo:` "
                   "objectives and `alerts:` settings; default: the built-in defaults the committed files use)")
    s.add_argument("--out", metavar="DIR", help="root to write under (default: this checkout)")

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


def serve_config(args, environ=os.environ, origins: dict | None = None):
    """The configuration `serve` runs with: its flags over `environ` over its config file over the defaults.
    `healthcheck` resolves the listen address of a running serve through this same function."""
    flags = {"profile": args.profile, "log_files": args.log_file,
             "from_start": True if args.from_start else None, "from_end": True if args.from_end else None,
             "positions_file": args.positions_file, "sglang_url": args.sglang_url, "listen": args.listen,
             "web_config": args.web_config, "scrape_interval": args.scrape_interval,
             "scrape_timeout": args.scrape_timeout}
    return build(flags, environ=environ, config_file=args.config, origins=origins)
