#!/usr/bin/env python3
"""Log hand-off for SGLang: copy a program's stdout/stderr through unchanged AND into a size-bounded file.

SGLang logs only to stderr and has no log-file option. In Kubernetes we run the server as

    python3 handoff.py --file /logs/sglang.log --max-bytes 50MiB --backups 2 -- \
        python3 -m sglang.launch_server ... --enable-metrics

The wrapper starts the command as its child, copies every byte of the child's stdout/stderr to its own
stdout/stderr (so `kubectl logs` shows exactly what SGLang printed, rank prefixes included), and appends the
complete lines to FILE, rotating by rename (FILE -> FILE.1 -> ... -> FILE.<backups>) before FILE would exceed
--max-bytes. Disk use is therefore at most (backups + 1) * max-bytes. It forwards SIGTERM/SIGINT/SIGHUP/
SIGQUIT/SIGUSR1/SIGUSR2 to the child and exits with the child's status (128+N when killed by signal N).
A write error on FILE (disk full, ...) never stops the pass-through or the server: it is reported once per
kind on stderr and the file is retried at the next rotation point.

Without `-- command` it is a pipe filter: `cmd 2>&1 | python3 handoff.py --file F` (copy to stdout).

Stdlib only, no imports from the sglang-exporter package: it runs with the SGLang image's own python3,
mounted from a ConfigMap (deploy/kubernetes/base/handoff-configmap.yaml is generated from this file).
"""
from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import threading

__all__ = ["RotatingWriter", "parse_size", "main"]

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": 1024**2,
          "g": 1000**3, "gb": 1000**3, "gib": 1024**3}


def parse_size(text: str) -> int:
    """'50MiB' -> 52428800; '300k' -> 300000; '4096' -> 4096."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 50MiB, 300KiB, 1000000)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


class RotatingWriter:
    """Appends whole lines to `path`; renames it to path.1 (path.1 -> path.2, ...) before it would exceed
    `max_bytes`. Thread-safe: `write_lines` holds a lock, so lines from two streams never interleave."""

    def __init__(self, path: str, max_bytes: int, backups: int, max_line_bytes: int | None = None):
        if backups < 1:
            raise ValueError("backups must be >= 1 (a follower needs the renamed file to finish reading)")
        self.path, self.max_bytes, self.backups = path, max_bytes, backups
        self.max_line_bytes = min(max_line_bytes or max_bytes, max_bytes)
        self.lock = threading.Lock()
        self.fd: int | None = None
        self.size = 0
        self.rotations = 0
        self.lines_cut = 0
        self.errors: dict[str, int] = {}
        self._open()

    def _error(self, where: str, exc: OSError) -> None:
        key = f"{where}: {exc.strerror or exc}"
        self.errors[key] = self.errors.get(key, 0) + 1
        if self.errors[key] == 1:
            _say(f"handoff: {key} ({self.path}); the pass-through continues")

    def _open(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.fchmod(self.fd, 0o644)  # the exporter runs as another user
            self.size = os.fstat(self.fd).st_size  # container restart: append to the existing file
        except OSError as exc:
            self.fd = None
            self._error("open", exc)

    def _rotate(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        try:
            for i in range(self.backups - 1, 0, -1):
                src = f"{self.path}.{i}"
                if os.path.exists(src):
                    os.replace(src, f"{self.path}.{i + 1}")
            if os.path.exists(self.path):
                os.replace(self.path, f"{self.path}.1")
            self.rotations += 1
        except OSError as exc:
            self._error("rotate", exc)
        self._open()

    def _append(self, data: bytes) -> None:
        if self.fd is None:
            return
        try:
            view = memoryview(data)
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
            self.size += len(data)
        except OSError as exc:
            self._error("write", exc)
            self.size += len(data)  # forces a rotation (and a re-open) soon

    def write_lines(self, block: bytes) -> None:
        """`block` holds complete lines, each ending in b'\\n'."""
        if not block:
            return
        with self.lock:
            if self.fd is None and self.size < self.max_bytes:
                self._open()
            lines = None
            if len(block) > self.max_line_bytes:
                lines = [x + b"\n" for x in block.split(b"\n")[:-1]]
            if self.size + len(block) <= self.max_bytes and (
                    lines is None or max(map(len, lines)) <= self.max_line_bytes):
                self._append(block)
                return
            for line in lines if lines is not None else [x + b"\n" for x in block.split(b"\n")[:-1]]:
                if len(line) > self.max_line_bytes:  # keep the file bound; the pass-through keeps it whole
                    line = line[: self.max_line_bytes - 1] + b"\n"
                    self.lines_cut += 1
                if self.size > 0 and self.size + len(line) > self.max_bytes:
                    self._rotate()
                self._append(line)

    def close(self) -> None:
        with self.lock:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None


def _say(msg: str) -> None:
    try:
        os.write(2, (msg + "\n").encode())
    except OSError:
        pass


def pump(src_fd: int, copy_fd: int | None, writer: RotatingWriter, chunk: int = 1 << 16) -> None:
    """Copy src_fd to copy_fd byte for byte (no delay: tqdm's \\r updates pass as they come) and hand the
    complete lines to the writer. A partial last line is completed with b'\\n' at EOF."""
    pending = b""
    copy_ok = copy_fd is not None
    while True:
        try:
            data = os.read(src_fd, chunk)
        except InterruptedError:
            continue
        except OSError:
            data = b""
        if not data:
            break
        if copy_ok and copy_fd is not None:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(copy_fd, view):]
            except OSError:  # nobody reads our stdout any more: keep the file going
                copy_ok = False
        pending += data
        cut = pending.rfind(b"\n")
        if cut >= 0:
            writer.write_lines(pending[: cut + 1])
            pending = pending[cut + 1:]
        elif len(pending) > writer.max_line_bytes:
            writer.write_lines(pending[: writer.max_line_bytes - 1] + b"\n")
            pending = b""  # the rest of this over-long line is dropped from the file (not from the copy)
    if pending:
        writer.write_lines(pending + b"\n")


FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def run_wrapped(cmd: list[str], writer: RotatingWriter, copy: bool = True, drain_timeout: float = 5.0) -> int:
    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        _say(f"handoff: cannot start {cmd[0]!r}: {exc}")
        return 127
    for name in FORWARDED:
        signal.signal(getattr(signal, name), lambda signum, _frame: child.send_signal(signum))
    # the pumps start with the forwarded signals blocked (a thread inherits its creator's mask), so the kernel
    # hands each to the main thread, whose waitpid returns to run the handler; a signal taken by a pump thread
    # would wait, unforwarded, until SGLang exited. One arriving meanwhile stays pending for the main thread.
    forwarded = [getattr(signal, name) for name in FORWARDED]
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    threads = [threading.Thread(target=pump, args=(p.fileno(), fd if copy else None, writer), daemon=True)
               for p, fd in ((child.stdout, 1), (child.stderr, 2)) if p is not None]   # (both are pipes)
    for t in threads:
        t.start()
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    while True:
        try:
            rc = child.wait()
            break
        except InterruptedError:
            continue
    # Grandchildren (SGLang's scheduler processes) may still hold the pipes; do not wait forever for them.
    for t in threads:
        t.join(drain_timeout)
    return 128 - rc if rc < 0 else rc


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, cmd = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(prog="handoff", description=__doc__.split("\n\n")[0],
                                 epilog="usage with a command: handoff --file F [...] -- program args...")
    ap.add_argument("--file", required=True, help="log file to write (rotated by rename)")
    ap.add_argument("--max-bytes", type=parse_size, default=parse_size("50MiB"), help="default 50MiB")
    ap.add_argument("--backups", type=int, default=2, help="rotated files kept (>= 1); default 2")
    ap.add_argument("--max-line-bytes", type=parse_size, default=parse_size("1MiB"),
                    help="longer lines are cut in the file (never in the pass-through); default 1MiB")
    ap.add_argument("--no-copy", action="store_true", help="do not copy to stdout/stderr")
    args = ap.parse_args(argv)
    if args.backups < 1:
        ap.error("--backups must be >= 1")
    if args.max_bytes < 1024:
        ap.error("--max-bytes must be >= 1KiB")
    writer = RotatingWriter(args.file, args.max_bytes, args.backups, args.max_line_bytes)
    try:
        if cmd:
            return run_wrapped(cmd, writer, copy=not args.no_copy)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        pump(0, None if args.no_copy else 1, writer)
        return 0
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main())
