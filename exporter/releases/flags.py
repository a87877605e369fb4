"""Server arguments across SGLang releases: which release printed a server_args line, a setting's value
whatever the release calls it, and the flag that sets it in the user's release.

One source: the per-release ServerArgs data in exporter/releases (fields, flags, defaults, renames). A
setting is named by any of its field names ("cuda_graph_max_bs"); its rename chain
(cuda_graph_max_bs -> cuda_graph_max_bs_decode) is followed both ways.
"""
from __future__ import annotations

import ast
import functools

from exporter import releases

# A complete server_args dump lacks at most this many of its release's fields (a field the grammar could not
# read); with more missing it is a partial dict and says only which releases have its keys.
_FULL_DUMP_SLACK = 3


@functools.cache
def _index() -> tuple:
    """Per extracted release (by position, oldest first): its field names, flag -> field (primary flags and
    aliases) and field -> primary flag. Built once from the data in one pass (the loader's per-release calls
    build every field each time: too slow to call per flag and release)."""
    rels = releases.releases()
    pos = {r: i for i, r in enumerate(rels)}
    n = len(rels)

    def spans(changes: list) -> list:
        out = [None] * n
        for i, (rel, val) in enumerate(changes):
            end = _pos(changes[i + 1][0], pos) if i + 1 < len(changes) else n
            out[_pos(rel, pos):end] = [val] * (end - _pos(rel, pos))
        return out
    fields: list[set] = [set() for _ in rels]
    accepts: list[dict] = [{} for _ in rels]
    primary: list[dict] = [{} for _ in rels]
    for name, e in releases._load("server_args.json").items():
        lo, hi = _pos(e["first"], pos), (_pos(e["last"], pos) if e["last"] else n - 1)
        absent = set(e.get("absent_in", ()))
        flag, aliases = spans(e["flag"]), spans(e.get("aliases", []))
        for j in range(lo, hi + 1):
            if rels[j] in absent:
                continue
            fields[j].add(name)
            if flag[j]:
                primary[j][name] = flag[j]
                accepts[j][flag[j]] = name
            for alias in aliases[j] or ():
                accepts[j].setdefault(alias, name)
    return rels, pos, [frozenset(f) for f in fields], accepts, primary


def _pos(release: str, pos: dict) -> int:
    return pos[release] if release in pos else pos[releases.resolve(release)]


@functools.cache
def chain(name: str) -> tuple[str, ...]:
    """Every field name of one setting across releases, oldest first: chain("cuda_graph_max_bs_decode") ->
    ("cuda_graph_max_bs", "cuda_graph_max_bs_decode")."""
    links: dict[str, set] = {}
    for r in releases.renames():
        if r.kind == "server_arg":
            links.setdefault(r.old, set()).add(r.new)
            links.setdefault(r.new, set()).add(r.old)
    seen, todo = {name}, [name]
    while todo:
        for n in links.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    first = {n: releases.first_release(n) for n in seen}
    return tuple(sorted(seen, key=lambda n: (releases.version_key(f) if (f := first[n]) else (0,), n)))


@functools.cache
def _infer(keys: frozenset) -> tuple[str, str] | None:
    rels, _, fields, _, _ = _index()
    scored = [(len(keys - fields[j]), len(fields[j] - keys), r) for j, r in enumerate(rels)]
    least_extra = min(s[0] for s in scored)
    if least_extra > len(keys) // 2:
        return None                      # most keys belong to no release: not a ServerArgs we know
    kept = [s for s in scored if s[0] == least_extra]
    least_missing = min(s[1] for s in kept)
    if least_missing <= _FULL_DUMP_SLACK:
        kept = [s for s in kept if s[1] == least_missing]
    order = [s[2] for s in kept]
    return order[0], order[-1]


def infer_release(server_args: dict, version: str | None = None,
                  family: str | None = None) -> tuple[str, str] | None:
    """(first, last) extracted release whose ServerArgs has the keys this server_args line printed (a full
    dump pins it to the releases with exactly those fields), narrowed to the releases of the batch lines'
    format `family` ("0.5.9-0.5.23", docs/log-events.md) when known; a printed version wins. None: not known.
    Where the two disagree (a partial server_args dump), the format family is the statement: a batch line's
    shape is printed by every release the same way."""
    if version:
        try:
            r = releases.resolve(version)
            return r, r
        except (KeyError, ValueError):
            pass
    keys = frozenset(k for k in server_args if isinstance(k, str))
    by_args = _infer(keys) if keys else None
    return _narrowed(by_args, family) if family else by_args


@functools.cache
def _narrowed(by_args: tuple[str, str] | None, family: str) -> tuple[str, str] | None:
    lo, _, hi = family.partition("-")
    try:
        # a family's upper bound names a release line: its .postN releases belong to it
        low, high = releases.version_key(lo), (*releases.version_key(hi or lo)[:3], 10**6)
    except ValueError:
        return by_args
    in_family = [r for r in releases.releases() if low <= releases.version_key(r) <= high]
    if by_args is None:
        return (in_family[0], in_family[-1]) if in_family else None
    first, last = releases.version_key(by_args[0]), releases.version_key(by_args[1])
    both = [r for r in in_family if first <= releases.version_key(r) <= last]
    if both:
        return both[0], both[-1]
    return (in_family[0], in_family[-1]) if in_family else by_args


def value(server_args: dict, name: str, release: tuple[str, str] | None = None):
    """The setting `name` as server_args printed it under any of its names; when no name is printed, the
    release's default (if the release is known and the default is a literal), else None."""
    for n in reversed(chain(name)):
        if n in server_args:
            return server_args[n]
    if release is not None:
        for n in chain(name):
            text = releases.server_arg_default(n, release[1])
            if text is not None:
                try:
                    return ast.literal_eval(text)
                except (ValueError, SyntaxError):
                    return None
    return None


@functools.cache
def _spellings(flag: str) -> tuple[str, ...]:
    """`flag` first, then the primary flags of the releases that do not accept `flag` for that setting."""
    rels, _, fields, accepts, primary = _index()
    name = next((a[flag] for a in reversed(accepts) if flag in a), flag[2:].replace("-", "_"))
    names = chain(name)
    out = [flag]
    for j in range(len(rels)):
        if flag not in accepts[j]:
            f = next((primary[j][n] for n in reversed(names) if n in primary[j]), None)
            if f and f not in out:
                out.append(f)
    return tuple(out)


def accepted(flag: str, release: tuple[str, str]) -> bool:
    """Whether the releases at both ends of `release` accept `flag` (it is spelt so across the range)."""
    _, pos, _, accepts, _ = _index()
    return all(flag in accepts[_pos(r, pos)] for r in release)


def spell(flag: str, release: tuple[str, str] | None) -> tuple[str, tuple[str, ...]]:
    """(the flag to name, every spelling of it that some release accepts). `flag` itself when every release
    of the range accepts it; else the one spelling the range's releases accept. For an unknown release (or a
    range that spans a rename) `flag`, and the caller names the others (`spellings`) too."""
    if not flag.startswith("--"):
        return flag, (flag,)
    spellings = _spellings(flag)
    if release is None or len(spellings) == 1:
        return flag, spellings
    _, pos, _, accepts, _ = _index()
    ends = [_pos(r, pos) for r in release]
    for candidate in spellings:
        if all(candidate in accepts[j] for j in ends):
            return candidate, spellings
    return flag, spellings
