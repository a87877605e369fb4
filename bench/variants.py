#!/usr/bin/env python3
"""A generated log rewritten as a realistic log may also be: what `analyze` pays for each, against the plain one.

    python bench/variants.py IN OUT --as json|openai|cri|docker|cjk|ms|stretch3|errors5

IN is a `genlog.py --profile realistic` log; OUT the same lines with one property changed:
  json      request logs as --log-requests-format json writes them (0.5.7+, behind SGLang's "[time] " prefix)
  openai    every other `Receive:` request log as 0.5.8+ logs an OpenAI request (`Receive OpenAI: obj=...`)
  cri       every line wrapped as the CRI runtime writes it (`kubectl logs`, /var/log/pods): time, stream, F
  docker    every line wrapped as docker's json-file driver writes it
  cjk       the prompts' French replaced by Chinese (a character past Latin-1 in most blocks)
  ms        millisecond timestamps (SGLANG_LOG_MS=1, 0.5.6+)
  stretch3  every timestamp three times as far from the first (the same lines over three times the time:
            three times the evaluations)
  errors5   each handled request error ("Error in request: ..." and its raw traceback, 1 % of requests in
            the realistic profile) written five times: a service whose clients send many bad requests
Then time both, e.g. `python bench/rounds.py --file OUT --profile realistic BEFORE AFTER`. The lines and
their order are the same, so the work of an equal-work mtail program barely moves (bench/README.md, "Issue
35, fifth look").
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import sys

STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
REQUEST = re.compile(r"^\[([^\]]+)\] (Receive|Finish): obj=GenerateReqInput\((.*)$")
RID = re.compile(r"rid='([0-9a-f]+)'")


def rewrite(lines, how: str):
    """The lines of `how`'s variant (see the module's text), one for one."""
    first = None
    stretched: dict[str, str] = {}
    ms: dict[str, int] = {}
    receives = 0
    error: list[str] = []       # (errors5) the lines of the request error being read
    for i, line in enumerate(lines):
        if how == "errors5":
            if "] Error in request: " in line or error and not line.startswith("["):
                error.append(line)
                continue
            if error:
                yield from error * 5
                error = []
            yield line
            continue
        if how == "json":
            m = REQUEST.match(line)
            if m:
                ts, kind, rest = m.groups()
                rid = RID.search(rest)
                record = {"timestamp": ts.replace(" ", "T") + ".123456",
                          "event": "request.received" if kind == "Receive" else "request.finished",
                          "rid": rid.group(1) if rid else "", "obj": rest[:300]}
                line = f"[{ts}] {json.dumps(record)}"
        elif how == "openai":
            if "] Receive: obj=GenerateReqInput(" in line:
                receives += 1
                if receives % 2:
                    line = line.replace("] Receive: obj=GenerateReqInput(",
                                        "] Receive OpenAI: obj=ChatCompletionRequest(", 1)
        elif how in ("cri", "docker"):
            ts = f"2025-08-11T17:{i // 60000 % 60:02d}:{i // 1000 % 60:02d}.{i % 1000:03d}456789Z"
            line = f"{ts} stderr F {line}" if how == "cri" else \
                json.dumps({"log": line + "\n", "stream": "stderr", "time": ts})
        elif how == "cjk":
            line = line.replace("français", "中文翻译")
        elif how == "ms":
            m = STAMP.match(line)
            if m:
                ms[m.group(1)] = n = min(999, ms.get(m.group(1), 0) + 7)
                line = f"[{m.group(1)}.{n:03d}" + line[m.end():]
        elif how == "stretch3":
            m = STAMP.match(line)
            if m:
                stamp = m.group(1)
                if stamp not in stretched:
                    t = dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S")
                    first = first or t
                    stretched[stamp] = (first + (t - first) * 3).strftime("%Y-%m-%d %H:%M:%S")
                line = "[" + stretched[stamp] + line[m.end():]
        yield line
    yield from error * 5


VARIANTS = ("json", "openai", "cri", "docker", "cjk", "ms", "stretch3", "errors5")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="a genlog.py --profile realistic log")
    ap.add_argument("out")
    ap.add_argument("--as", dest="how", choices=VARIANTS, required=True)
    a = ap.parse_args(argv)
    n = 0
    with open(a.source, encoding="utf-8") as src, open(a.out, "w", encoding="utf-8") as out:
        for line in rewrite((raw.rstrip("\n") for raw in src), a.how):
            out.write(line + "\n")
            n += 1
    print(f"wrote {n} lines ({a.how}) to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
