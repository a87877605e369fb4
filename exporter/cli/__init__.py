"""Command line: serve, parse, analyze, check-config, generate, simulate, healthcheck, demo.

Exit codes: 0 ok, 2 usage or configuration error (the message names the flag, file or key), 1 runtime failure.
The grammar is in arguments.py, what each command does in commands.py.
"""
from __future__ import annotations

import sys

from exporter.cli.arguments import build_parser, parse, serve_config
from exporter.cli.commands import COMMANDS, EXIT_OK, EXIT_RUNTIME, EXIT_USAGE, _err
from exporter.config import ConfigError

__all__ = ["EXIT_OK", "EXIT_RUNTIME", "EXIT_USAGE", "build_parser", "main", "parse", "serve_config"]


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
        # simulate's parser names its own function (the simulator's package is imported only for it)
        run = COMMANDS.get(args.command) or args.func
        return run(args)
    except ConfigError as exc:
        _err(str(exc))
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_RUNTIME


if __name__ == "__main__":
    raise SystemExit(main())
