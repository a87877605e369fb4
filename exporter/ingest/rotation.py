"""Finding a followed file again after it was rotated away: by inode, or (copytruncate) by its head.

Rotation tools keep the rotated file next to the original under a name that starts with the original's:
``app.log.1``, ``app.log-20250101`` (logrotate ``dateext``), ``0.log.20250101-120000`` (kubelet). Compressed
ones (``.gz`` and the like) are skipped: a followed file is read by descriptor and byte offset, which a
compressed copy does not keep (`analyze` reads them whole, exporter/ingest/lines.py).
"""
from __future__ import annotations

import os
import stat

from exporter.ingest.positions import FINGERPRINT_BYTES

COMPRESSED = (".gz", ".bz2", ".xz", ".zst", ".lz4", ".lzma", ".zip", ".z", ".br", ".sz")


def plain(name: str) -> bool:
    """Not a compressed file by its name (the follower cannot resume inside one)."""
    return not name.lower().endswith(COMPRESSED)


def rotated_from(name: str, base: str) -> bool:
    """Whether file name `name` is what rotating file name `base` by rename leaves: `base`, a separator
    (``.``, ``-``, ``_``), a suffix. (`rotated_siblings` is looser: what it finds is then matched by inode or
    head, so a wrong candidate costs a look, not a misread.)"""
    return len(name) > len(base) and name.startswith(base) and name[len(base)] in ".-_"


def rotated_copies(paths) -> dict[str, str]:
    """Those of `paths` rotated from another of them (same directory, `rotated_from`), each with the one it
    came from. A glob such as ``sglang.log*`` matches the live file and its rotated copies; the copies are read
    as part of the live file (its rotation), so followed on their own as well their lines would count twice."""
    split = [(p, *os.path.split(os.path.abspath(p))) for p in paths]
    by_name = {(d, base): p for p, d, base in split}
    out = {}
    # each cut of a name at a separator is a name it could be rotated from: linear in the names, where
    # comparing every pair would cost a glob of thousands of files a second per poll
    for p, d, base in split:
        for i, c in enumerate(base):
            if i and c in ".-_" and (d, base[:i]) in by_name:
                out[p] = by_name[d, base[:i]]
                break
    return out


def in_log_order(paths: list[str]) -> list[str]:
    """`paths` with each file's rotated copies among them (`rotated_copies`) moved just before it, oldest
    first: a shell's ``sglang.log*`` lists the live file first and ``.1`` (newer) before ``.2``, the reverse
    of when their lines were written. Numbered copies (``.1``, ``.2``, logrotate's default) are older the
    higher their number; dated ones (``-20261127``, kubelet's ``.20261127-120000``) the earlier their date."""
    copies = rotated_copies(paths)
    if not copies:
        return list(paths)
    out: list[str] = []
    for p in paths:
        if p not in copies:                 # (a copy's live file is always among `paths`)
            mine = sorted((c for c, live in copies.items() if live == p), key=lambda c: copy_age(c, p))
            out += mine + [p]
    return out


def copy_age(copy: str, live: str) -> tuple:
    """A sort key of rotated copy `copy` of `live` by its name, older first: numbered copies are older the
    higher their number, dated ones the earlier their date (``.3.gz`` is the third copy, compressed)."""
    suffix = os.path.basename(copy)[len(os.path.basename(live)) + 1:]
    if not plain(suffix):
        suffix = suffix.rsplit(".", 1)[0]
    numbered = suffix.isdigit() and len(suffix) < 6
    return (1, -int(suffix)) if numbered else (0, suffix)


def newer_copies(path: str, than: str, than_ns: int, skip: set) -> list[str]:
    """The rotated copies of ``path`` (`rotated_from` its name, uncompressed) newer than the file named
    ``than`` now (last written at ``than_ns``) and none of the files ``skip`` names (device, inode), oldest
    first: the files a path was rotated through after ``than`` was left, when it was rotated more than once
    since. Newer means later by name (`copy_age`) and written no earlier: the name alone would take a file
    renamed into the pattern for a copy, the time alone an older copy that its writer finished after ``than``
    was created (a writer that reopens late) for a newer one. When ``than`` is no copy by its name (deleted),
    only copies written after it count; reading a file twice would count its lines twice."""
    mine = copy_age(than, path) if rotated_from(os.path.basename(than), os.path.basename(path)) else None
    found = []
    for p in copies_of(path):
        try:
            st = os.stat(p)
        except OSError:
            continue
        if st.st_mtime_ns < than_ns:
            break                       # newest first: the rest are older still
        age = copy_age(p, path)
        if (st.st_dev, st.st_ino) in skip or (age <= mine if mine is not None else st.st_mtime_ns == than_ns):
            continue
        found.append((st.st_mtime_ns, age, p))
    return [p for *_, p in sorted(found)]


def copies_of(path: str) -> list[str]:
    """`rotated_siblings` held to the naming rule (`rotated_from`): the uncompressed rotated copies of ``path``,
    most recently modified first."""
    base = os.path.basename(path)
    return [p for p in rotated_siblings(path) if rotated_from(os.path.basename(p), base)]


def rotated_siblings(path: str) -> list[str]:
    """Uncompressed files next to ``path`` whose name starts with its name (not ``path`` itself), most
    recently modified first."""
    d, base = os.path.split(os.path.abspath(path))
    found = []
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name != base and e.name.startswith(base) and plain(e.name):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        found.append((st.st_mtime_ns, e.path))
    except OSError:
        return []
    return [p for _, p in sorted(found, reverse=True)]


def find_inode(dirs: list[str], dev: int, ino: int) -> str | None:
    """A path, in one of ``dirs``, of the regular uncompressed file with that device and inode."""
    for d in dict.fromkeys(dirs):
        try:
            with os.scandir(d) as it:
                for e in it:
                    try:
                        if e.inode() != ino or not plain(e.name):
                            continue
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if st.st_dev == dev and stat.S_ISREG(st.st_mode):
                        return e.path
        except OSError:
            continue
    return None


def newest_mtime(path: str) -> int:
    """The newest modification time (ns) of ``path`` and its rotated siblings; 0 when none can be read."""
    newest = 0
    for p in [path, *rotated_siblings(path)]:
        try:
            newest = max(newest, os.stat(p).st_mtime_ns)
        except OSError:
            continue
    return newest


def find_copy_since(path: str, after_ns: int, skip: set, head: bytes) -> str | None:
    """The newest rotated sibling of ``path`` written after ``after_ns`` that is none of the files ``skip``
    names (device, inode), not empty, and not what ``path`` holds now (``head``: its first bytes): the copy of
    a file copytruncated while it had no head fingerprint, when there is one."""
    for p in rotated_siblings(path):
        try:
            st = os.stat(p)
            if st.st_mtime_ns <= after_ns:
                break                   # newest first: the rest are older still
            if (st.st_dev, st.st_ino) in skip or st.st_size == 0:
                continue
            with open(p, "rb") as fh:
                theirs = fh.read(FINGERPRINT_BYTES)
        except OSError:
            continue
        n = min(len(theirs), len(head))
        if n == 0 or theirs[:n] != head[:n]:
            return p
    return None


def head_matches(fd: int, fp: bytes) -> bool:
    return not fp or os.pread(fd, len(fp), 0) == fp


def find_copy(path: str, fp: bytes, min_size: int) -> str | None:
    """The rotated sibling of ``path`` that is a copy of what ``path`` held (copytruncate): same head
    fingerprint, at least ``min_size`` bytes. Without a fingerprint nothing can be told apart: None."""
    if not fp:
        return None
    for p in rotated_siblings(path):
        try:
            fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            continue
        try:
            if os.fstat(fd).st_size >= min_size and head_matches(fd, fp):
                return p
        except OSError:
            pass
        finally:
            os.close(fd)
    return None
