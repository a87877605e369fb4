"""The catalog's name lifecycles: SGLang's families across releases (catalog_native) and our own metrics
(catalog_metrics), and the catalog facade that every reader imports."""
from __future__ import annotations

from pathlib import Path

import pytest

from exporter import catalog, releases
from exporter.catalog.metrics import DEPRECATED_IN
from exporter.catalog.native import NATIVE_VALUES, native_families, native_family, native_metric_names

ROOT = Path(__file__).resolve().parent.parent


def test_every_rename_points_from_an_older_family_to_a_newer_one():
    renames = [(old, new) for v in NATIVE_VALUES for old, new in v.replaced_by.items()]
    assert len(renames) >= 4
    key = releases.version_key
    for old, new in renames:
        o, n = native_family(old), native_family(new)
        assert o.value == n.value, (old, new)             # a rename feeds the same value
        assert o.deprecated and o.replaced_by == new, o
        assert not n.deprecated, n                       # the newest release still has the new spelling
        assert key(n.first) > key(o.first), (o, n)
        # the table lists the newest spelling first: a scrape carrying both reads the new one
        fams = next(v.families for v in NATIVE_VALUES if v.name == o.value)
        assert fams.index(new) < fams.index(old)


def test_family_records_agree_with_the_release_data():
    key = releases.version_key
    for f in native_families():
        spellings = [n for n in (f"sglang:{f.short}", f"sglang:{f.short}_total") if releases.first_release(n)]
        assert f.first == min((releases.first_release(n) for n in spellings), key=key), f
        assert (f.last is None) == any(releases.last_release(n) is None for n in spellings), f
        assert f.exposed in native_metric_names(f.value)
    # a gauge that became a counter (0.5.2) is one family, still current; a dropped family is deprecated
    assert not native_family("num_transfer_failed_reqs").deprecated
    assert native_family("total_retracted_reqs").last == "0.5.2"
    assert native_family("num_prefill_prealloc_queue_reqs").deprecated
    with pytest.raises(KeyError, match="not an SGLang family the catalog reads"):
        native_family("no_such_family")


def test_deprecated_metrics_name_a_current_replacement():
    current = {m.name for m in catalog.METRICS if not m.deprecated}
    deprecated = [m for m in catalog.METRICS if m.deprecated]
    assert deprecated
    for m in deprecated:
        assert m.deprecated == DEPRECATED_IN, m
        assert any(name in m.replaced_by for name in current), m
    assert all(not m.replaced_by for m in catalog.METRICS if not m.deprecated)


def test_every_signal_unit_has_one_value_family():
    for s in catalog.SIGNALS:
        name, scale = catalog.signal_value_metric(s.value_unit)
        assert name in catalog.METRICS_BY_NAME and scale > 0
    names = [name for name, _ in catalog.SIGNAL_VALUE_METRICS.values()]
    assert len(set(names)) == len(names)
    assert not any(n.endswith(("_count", "_sum", "_bucket", "per_minute")) for n in names)
    with pytest.raises(KeyError, match="SIGNAL_VALUE_METRICS"):
        catalog.signal_value_metric("furlongs")


def test_facade_keeps_every_name_readers_use():
    for name in ("SIGNALS", "SIGNALS_BY_ID", "FAILURE_IDS", "META_ALERTS", "METRICS", "METRICS_BY_NAME", "NS",
                 "GIB", "PROFILES", "DEFAULT_PROFILE", "SEVERITIES", "RUNBOOK_BASE", "VALUE_RANGES", "FIELD_RANGES",
                 "DEFAULT_FIELD_RANGE", "COUNT_MAX", "COUNTER_MAX", "RATIO_MAX", "BYTES_MAX", "SECONDS_MAX",
                 "Signal", "Advice", "AlertSpec", "MetaAlert", "MetricSpec", "active_signals"):
        assert hasattr(catalog, name), name
    assert len(catalog.SIGNALS_BY_ID) == len(catalog.SIGNALS)


@pytest.mark.parametrize("pattern", ["exporter/catalog/*.py", "exporter/simulate/*.py", "exporter/web/expose.py",
                                     "exporter/generate/metrics_doc.py"])
def test_modules_stay_small_and_say_their_job(pattern):
    for path in ROOT.glob(pattern):
        text = path.read_text()
        assert len(text.splitlines()) <= 450, path
        assert text.startswith('"""'), f"{path}: no docstring"
