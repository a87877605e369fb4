"""Small line charts as inline SVG, written by hand: the status page draws them on every request, so they must
be cheap and need no plotting library. Also the time axis both faces share (`time_ticks`): labels that say
something at every span, from seconds to weeks, and never more of them than fit."""
from __future__ import annotations

import math
from datetime import datetime, timezone
from html import escape
from operator import itemgetter

# Tick spacings a person reads easily, in seconds: 1 s up to 4 weeks.
_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600,
          86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400)
CHAR_PX = 6.6           # the width of one character of an 11 px sans-serif label, a little generous
LABEL_GAP_PX = 14       # the least room between two tick labels


def _utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=timezone.utc)


def _label_format(step: float, t0: float, t1: float) -> str:
    """strftime format of the tick labels for ticks `step` seconds apart over [t0, t1] (UTC): seconds only when
    ticks are seconds apart, the date once the span leaves one day, the year once it leaves one year."""
    d0, d1 = _utc(t0), _utc(t1)
    if step >= 86400:
        return "%Y-%m-%d" if d0.year != d1.year else "%m-%d"
    clock = "%H:%M:%S" if step < 60 else "%H:%M"
    return ("%m-%d " + clock) if d0.date() != d1.date() else clock


def time_ticks(t0: float, t1: float, width_px: float) -> list[tuple[float, str]]:
    """Tick positions (epoch seconds) and labels for a time axis over [t0, t1] drawn `width_px` wide: the finest
    spacing of `_STEPS` whose labels fit without touching, aligned to whole UTC units."""
    if not (math.isfinite(t0) and math.isfinite(t1)) or t1 < t0:
        return []
    span = t1 - t0
    for step in _STEPS:
        fmt = _label_format(step, t0, t1)
        label_px = len(_utc(t0).strftime(fmt)) * CHAR_PX + LABEL_GAP_PX
        room = max(1, int(width_px // label_px))
        if span / step + 1 <= room:
            break
    else:
        step = _STEPS[-1] * math.ceil(span / _STEPS[-1] / max(1, int(width_px // label_px)))
        fmt = _label_format(step, t0, t1)
    first = math.ceil(t0 / step) * step
    ticks: list[tuple[float, str]] = []
    t: float = first
    while t <= t1 + 1e-9:
        ticks.append((t, _utc(t).strftime(fmt)))
        t += step
    if not ticks:          # a span shorter than a second: one tick saying when
        ticks.append((t0, _utc(t0).strftime("%H:%M:%S")))
    return ticks


def _end_label(t0: float, t1: float, ts: float) -> str:
    """The label of one end of a span too short for aligned ticks: to the second, or to the tenth of a second
    when both ends fall in one second."""
    if _utc(t0).strftime("%H:%M:%S") != _utc(t1).strftime("%H:%M:%S"):
        return _utc(ts).strftime("%H:%M:%S")
    return _utc(ts).strftime("%H:%M:%S.%f")[:10]


def value_ticks(lo: float, hi: float, count: int = 4) -> list[float]:
    """About `count` round values (1, 2, 2.5, 5 x 10^k apart) covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    out = []
    v = start
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    if out[-1] < hi:
        out.append(round(out[-1] + step, 10))
    return out


def value_label(v: float) -> str:
    """A y tick label: short (12k, 1.5M), no float noise."""
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    return f"{v:g}"


def decimate(t: list, y: list, buckets: int) -> tuple[list, list]:
    """Min-max decimation: at most 2 points per bucket, keeping each bucket's extremes (peaks of queue and
    retractions must survive downsampling). None and NaN values are dropped."""
    pts = [(a, b) for a, b in zip(t, y) if b is not None and not (isinstance(b, float) and math.isnan(b))]
    if len(pts) <= 2 * buckets:
        return [p[0] for p in pts], [p[1] for p in pts]
    out_t, out_y = [], []
    size = len(pts) / buckets
    value = itemgetter(1)
    for i in range(buckets):
        chunk = pts[int(i * size):int((i + 1) * size)]
        if not chunk:
            continue
        lo = min(chunk, key=value)
        hi = max(chunk, key=value)
        for p in sorted({lo, hi}):
            out_t.append(p[0])
            out_y.append(p[1])
    return out_t, out_y


def line_chart(key: str, title: str, unit: str, t: list, series: list, t_range: tuple[float, float],
               hlines=(), y_floor: float | None = 0.0, y_ceiling: float | None = None,
               width: int = 400, height: int = 170) -> str:
    """One chart as an `<svg>` element: `series` is [(label, values, colour)] over the times `t`, `hlines`
    [(value, label, colour)] dashed threshold lines. Without a point to draw it says so instead (and carries
    data-points="0", which the browser test reads)."""
    left, right, top, bottom = 44, 20, 34, 24
    pw, ph = width - left - right, height - top - bottom
    t0, t1 = t_range
    drawn = []
    for label, ys, color in series:
        tt, yy = decimate(t, ys, buckets=max(1, pw // 2))
        drawn.append((label, tt, yy, color))
    values = [v for _, _, yy, _ in drawn for v in yy] + [v for v, _, _ in hlines]
    points = sum(len(tt) for _, tt, _, _ in drawn)
    lo = min(values, default=0.0) if y_floor is None else min(y_floor, min(values, default=y_floor))
    hi = max(values, default=1.0)
    if y_ceiling is not None:
        hi = max(hi, y_ceiling)
    yt = value_ticks(lo, hi if hi > lo else lo + 1)
    lo, hi = yt[0], yt[-1]

    def x(ts: float) -> float:
        return left + (0.5 if t1 <= t0 else (ts - t0) / (t1 - t0)) * pw

    def y(v: float) -> float:
        return top + ph - (v - lo) / (hi - lo) * ph

    out = [f'<svg class="chart" data-chart="{escape(key)}" data-points="{points}" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}" '
           f'xmlns="http://www.w3.org/2000/svg" font-family="system-ui,sans-serif" font-size="11">',
           f'<text x="{left}" y="13" font-size="12" font-weight="600" fill="#222">{escape(title)}</text>',
           f'<text x="{width - right}" y="13" text-anchor="end" fill="#666">{escape(unit)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#ccc"/>']
    for v in yt:
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eee"/>'
                   f'<text class="tick-y" x="{left - 4}" y="{y(v) + 4:.1f}" text-anchor="end" fill="#555">'
                   f'{escape(value_label(v))}</text>')
    labels = []
    for ts, label in time_ticks(t0, t1, pw):
        out.append(f'<line x1="{x(ts):.1f}" x2="{x(ts):.1f}" y1="{top}" y2="{top + ph}" stroke="#eee"/>')
        half = len(label) * CHAR_PX / 2
        if half <= x(ts) <= width - half:        # a label at the very edge would be cut off: its grid line stays
            labels.append((x(ts), "middle", label))
    if len(labels) < 2 and t1 > t0:
        # A short span (the first seconds of a sidecar, or the minute before a crash) can leave one aligned tick
        # or none, and one label gives no scale: say when the chart starts and ends instead.
        labels = [(x(t0), "start", _end_label(t0, t1, t0)), (x(t1), "end", _end_label(t0, t1, t1))]
    for at, anchor, label in labels:
        out.append(f'<text class="tick-x" x="{at:.1f}" y="{height - 8}" text-anchor="{anchor}" fill="#555">'
                   f'{escape(label)}</text>')
    legend_x: float = left
    for value, _label, color in hlines:
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y(value):.1f}" y2="{y(value):.1f}" stroke="{color}" '
                   f'stroke-dasharray="5 3"/>')
    for _label, tt, yy, color in drawn:
        if len(tt) == 1:
            out.append(f'<circle cx="{x(tt[0]):.1f}" cy="{y(yy[0]):.1f}" r="2.5" fill="{color}"/>')
        elif tt:
            pts = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in zip(tt, yy))
            out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="1.5"/>')
    for label, color, dashed in [(lb, c, False) for lb, _, _, c in drawn] + [(lb, c, True) for _, lb, c in hlines]:
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        out.append(f'<g class="legend"><line x1="{legend_x}" x2="{legend_x + 14}" y1="24" y2="24" stroke="{color}" '
                   f'stroke-width="2"{dash}/><text x="{legend_x + 18}" y="28" fill="#444">{escape(label)}</text></g>')
        legend_x += 26 + len(label) * CHAR_PX
    if not points:
        out.append(f'<text x="{left + pw / 2}" y="{top + ph / 2}" text-anchor="middle" fill="#888">'
                   "nothing to draw yet</text>")
    out.append("</svg>")
    return "".join(out)
