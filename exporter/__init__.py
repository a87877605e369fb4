"""sglang-exporter: health signals, tuning advice, alerts and dashboards for SGLang servers."""
__version__ = "0.1.0"
