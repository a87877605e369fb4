"""sglang-exporter: health signals, tuning advice, alerts and dashboards for SGLang servers."""
from exporter import _moved

__version__ = "0.1.0"

_moved.install()    # the names before the regroup (one package per stage) import until 0.3.0 (exporter/_moved.py)
