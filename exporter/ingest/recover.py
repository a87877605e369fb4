"""Recovering lines of files a follower lost sight of: saved positions applied when it starts (resume in the
same file, finish one rotated or truncated while it was down, or count it lost), the files a path was rotated
through unseen (more than one rotation since the last poll or the last save), the copy of a file found
copytruncated, and of one copytruncated before any of its bytes were read.

Used by `Follower` (exporter/ingest/follower.py); the rules are in docs/tailing.md ("Join, positions and
restart").
"""
from __future__ import annotations

import logging
import os

from exporter.ingest.positions import FINGERPRINT_BYTES
from exporter.ingest.rotation import (
    find_copy,
    find_copy_since,
    find_inode,
    head_matches,
    newer_copies,
    newest_mtime,
)
from exporter.ingest.tailfile import OpenFile, Tail, fd_name, open_at

log = logging.getLogger(__name__)


def restore(fo, t: Tail, e: dict, now: float) -> bool:
    """Open ``t`` at the saved position ``e`` for the follower ``fo``; True when the path's file is open."""
    drained = [f for d in e.get("draining", ()) if (f := drain_saved(fo, t, d, now)) is not None]
    if e["ino"] == 0:
        # nothing was there: what is there now is new, and so is any file it was rotated to since (after the
        # newest file drained then: one created at the path, rotated away again while we were down)
        opened = fo._open(t, at_end=False)
        if drained:
            read_between(fo, t, drained[-1], now, set())
        return opened
    # Opened first, then compared by the descriptor's device + inode: a rotation between a stat of the path
    # and its open would otherwise make us take the new file for ours truncated, read ours once as its
    # "copy" and lose what its writer still appends to it (a writer that reopens late).
    if not fo._open(t, at_end=False):
        try:
            st = os.stat(t.path)
        except OSError:
            st = None
        if st is not None and (st.st_dev, st.st_ino) == (e["dev"], e["ino"]):
            fo._saved[t.path] = dict(e, draining=[])    # ours, unreadable right now: applied at a later poll
            return False
        saved = drain_saved(fo, t, e, now)      # rotated away while we were down; the path is read later
        if saved is not None:
            read_between(fo, t, saved, now, {(st.st_dev, st.st_ino)} if st is not None else set())
        t.stats.rotations += st is not None
        return False
    cur = t.cur
    assert cur is not None                      # _open returned True: the path's file is open
    if (cur.dev, cur.ino) != (e["dev"], e["ino"]):
        # the path names another file: ours was rotated away while we were down (read first, the new from 0)
        saved = drain_saved(fo, t, e, now)
        t.stats.rotations += 1
        if saved is not None:
            read_between(fo, t, saved, now, {(cur.dev, cur.ino)})
        return True
    fp = bytes.fromhex(e["fp"])
    if os.fstat(cur.fd).st_size >= e["offset"] and head_matches(cur.fd, fp):
        cur.seek(e["offset"], e["lineno"], e["skip"])
        cur.fp = fp
        cur.copy_after = e.get("copy_after_ns") if not fp else None
        return True
    # truncated (or rewritten) while we were down: the rest may be in the rotated copy
    copy = find_copy(os.path.realpath(t.path), fp, e["offset"])
    f = open_at(copy, e, fp, fo._splitter(t)) if copy else None
    if f is None:
        lost(t, e)
    else:
        f.once = True
        t.old.append(f)
        read_between(fo, t, f, now, {(cur.dev, cur.ino)})
    t.stats.truncations += 1
    return True


def drain_saved(fo, t: Tail, e: dict, now: float) -> OpenFile | None:
    """A saved file the path no longer names: drained from its offset when found, else counted lost.

    It is looked for by device + inode in the path's directory or the one it points into now (not in the
    directory the saved ``name`` says: a damaged or foreign positions file must not make us read files
    elsewhere). The file the path names now, or one already read, is not it: its inode was freed (the file
    compressed and deleted) and given to a new file, which an empty file's position (no head) cannot tell."""
    dirs = [os.path.dirname(os.path.realpath(t.path)), os.path.dirname(os.path.abspath(t.path))]
    taken = {(f.dev, f.ino) for f in t.old} | ({(t.cur.dev, t.cur.ino)} if t.cur is not None else set())
    try:
        st = os.stat(t.path)
        taken.add((st.st_dev, st.st_ino))
    except OSError:
        pass
    p = find_inode(dirs, e["dev"], e["ino"]) if (e["dev"], e["ino"]) not in taken else None
    f = open_at(p, e, bytes.fromhex(e["fp"]), fo._splitter(t), same_inode=True) if p else None
    if f is None:
        lost(t, e)
    else:
        f.since = now
        t.old.append(f)
    return f


def read_between(fo, t: Tail, left: OpenFile, now: float, skip: set) -> list[OpenFile]:
    """Queue, after ``left`` (a file of ``t`` rotated away, or its copytruncate copy), the files ``t``'s path
    was rotated through since ``left`` was written: more than one rotation between the saved position and a
    restart, or between two polls. Each is read from its start, oldest first, the newest drained like a
    renamed file; ``skip`` names (device, inode) files read otherwise (the path's file now). Returns those queued."""
    try:
        left_ns = os.fstat(left.fd).st_mtime_ns
    except OSError:
        return []
    queued = []
    skip = skip | {(f.dev, f.ino) for f in t.old} | ({(t.cur.dev, t.cur.ino)} if t.cur is not None else set())
    left_name = fd_name(left)                   # its name now (a numbered copy's number moves on)
    between = newer_copies(os.path.realpath(t.path), left_name, left_ns, skip)
    for i, p in enumerate(between):
        f = open_at(p, {"offset": 0, "lineno": 0, "skip": False}, b"", fo._splitter(t))
        if f is not None:
            f.take_fp()
            f.since = now
            # a newer one followed it, so its writer has left it: closed once read (at a rotation every few ms
            # held open for rotate_grace, they would run out of descriptors); the newest may still be written
            f.once = i < len(between) - 1
            t.old.append(f)
            queued.append(f)
            t.stats.rotations += 1
            log.info("log source %s: %s was rotated away after the file last read (%s): read it whole",
                     t.path, p, left_name)
    return queued


def lost(t: Tail, e: dict) -> None:
    t.stats.rotated_unread += 1
    log.warning("log source %s: the file last read at byte %d (%s, inode %d) is gone or changed and no "
                "rotated copy was found (compressed or deleted?); lines written to it after that byte, "
                "if any, are lost", t.path, e["offset"], e["name"] or t.path, e["ino"])


def copied_while_empty(fo, t: Tail, out: list, now: float) -> bool:
    """``t``'s file was empty when last seen (no head to recognise a copy by) and has content now: if it was
    filled and copytruncated meanwhile (between two polls, or while we were down), the copy is the rotated
    sibling written since then that is not a file we drain and not the start of what the file holds now.
    Read it first, whole; True when that stopped at the poll budget."""
    cur = t.cur
    assert cur is not None and cur.copy_after is not None   # called for an open file seen empty
    after, cur.copy_after = cur.copy_after, None
    skip = {(f.dev, f.ino) for f in t.old} | {(cur.dev, cur.ino)}
    copy = find_copy_since(os.path.realpath(t.path), after, skip, os.pread(cur.fd, FINGERPRINT_BYTES, 0))
    f = open_at(copy, {"offset": 0, "lineno": 0, "skip": False}, b"", fo._splitter(t)) if copy else None
    if f is None:
        return False
    f.once = True
    t.old.append(f)
    t.stats.truncations += 1
    return fo._drain(t, f, out, now)


def truncated(fo, t: Tail, out: list, now: float, behind: bool) -> bool:
    """``t``'s file shrank or its head changed (copytruncate, truncation, a rewrite): what it held after our
    offset is read from its copy when there is one (the rotated sibling with its head), then any copy made
    since (two copytruncates between polls), then the file from 0. True when reading stopped at the budget
    (``behind``: it already had)."""
    cur = t.cur
    assert cur is not None                          # only an open file is found truncated
    copy = find_copy(os.path.realpath(t.path), cur.fp, cur.offset)
    at = {"offset": cur.offset, "lineno": 0, "skip": False}
    f = open_at(copy, at, cur.fp, fo._splitter(t)) if copy else None
    if f is not None:
        # copytruncate: the lines between our offset and the truncation point are in the copy; our
        # splitter goes with it, to finish the line it holds
        f.split = cur.split
        f.once = True
        t.old.append(f)
        for g in [f, *read_between(fo, t, f, now, {(cur.dev, cur.ino)})]:
            behind = behind or fo._drain(t, g, out, now)
    else:
        cur.split.flush(out)
    cur.split = fo._splitter(t)
    cur.seek(0)
    cur.fp = b""
    cur.copy_after = newest_mtime(os.path.realpath(t.path))
    t.stats.truncations += 1
    return behind
