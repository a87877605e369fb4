"""What each command does, given its parsed arguments (arguments.py): parse, analyze, check-config, serve,
generate, healthcheck and demo (simulate is the simulator's own). Each returns the exit code."""
from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading

from exporter import __version__
from exporter.cli.arguments import serve_config
from exporter.cli.logging_setup import FORMATS as LOG_FORMATS
from exporter.cli.logging_setup import LEVELS as LOG_LEVELS
from exporter.cli.logging_setup import configure as configure_logging
from exporter.config import ConfigError, build, cannot_listen, url_host
from exporter.ingest.lines import ZSTD_MAGIC, compression

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2
log = logging.getLogger("exporter.cli")     # (the name it had before the command line was split)


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
    if head.startswith(ZSTD_MAGIC):
        return (f"{path}: zstd-compressed, which Python cannot read: decompress it first, e.g. "
                f"zstd -dc {path} | sglang-exporter analyze -")
    if b"\x00" in head and compression(head) is None:      # gzip, bzip2 and xz are read decompressed
        return f"{path}: binary data, not a text log"
    return None


def cmd_parse(args) -> int:
    from exporter.ingest.events import JsonLines
    from exporter.ingest.pipeline import SourceParser, iter_file_item_lists, layouts_read
    problem = next(filter(None, map(_check_input, args.files)), None)
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


def _check_html(fmt: str) -> str | None:
    """Why `--format html` cannot draw its charts, or None; checked before the replay, as _check_output is."""
    if fmt != "html":
        return None
    try:
        import matplotlib  # noqa: F401  (an optional extra: the HTML report's charts)
    except ImportError:
        return ("--format html draws its charts with matplotlib, which is not installed here: "
                "pip install 'sglang-exporter[html]', or choose --format text or --format json")
    return None


def _config(args, origins: dict | None = None, **extra):
    flags = {"profile": getattr(args, "profile", None), **extra}
    return build(flags, config_file=getattr(args, "config", None), origins=origins)


def cmd_analyze(args) -> int:
    from exporter.ingest.rotation import in_log_order
    from exporter.report.analyze import analyze
    from exporter.report.text import render_text
    problem = next(filter(None, map(_check_input, args.files)), None)
    if problem:
        _err(problem)
        return EXIT_USAGE
    problem = _check_output(args.output, args.format) or _check_html(args.format)
    if problem:
        _err(problem)
        return EXIT_USAGE
    origins: dict = {}
    cfg = _config(args, origins)
    files = in_log_order(args.files)
    if files != args.files:
        print(f"analyze: reading {', '.join(files)} in this order (a file's rotated copies before it, oldest "
              "first)", file=sys.stderr)
    report = analyze(files, cfg, progress=None if not args.quiet else False, series=args.format == "html",
                     profile_default="profile" not in origins)
    if report["lines"]["read"] and not report["lines"]["recognised"]:
        seen = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in list(report["layouts"]["skipped"].items())[:6])
        _err(f"{', '.join(files)}: no SGLang log record found (not an SGLang log?): no line holds a message "
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
             scheme, url_host(server.server_address[0]), server.server_address[1], cfg.profile,
             "" if "profile" in origins else ", the default", ", ".join(cfg.log_files) or "none",
             cfg.sglang_url or "none")
    # timed, never one untimed wait: the kernel may hand SIGTERM to any of our threads, and CPython runs the
    # handler only when the main thread next runs Python code, which an untimed lock wait never lets it do
    # (seen: a stop ignored until Kubernetes' SIGKILL, positions unsaved)
    while not done.wait(1.0):
        pass
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
        here = Path(__file__).resolve().parents[2]      # exporter/cli/commands.py -> the checkout
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


# command name -> what runs it
COMMANDS = {
    "parse": cmd_parse,
    "analyze": cmd_analyze,
    "check-config": cmd_check_config,
    "serve": cmd_serve,
    "generate": cmd_generate,
    "healthcheck": cmd_healthcheck,
    "demo": cmd_demo,
}
