"""Alerts that watch the monitoring itself (exporter down, target down, log parser drift, stale logs, watchdog)."""
from __future__ import annotations

from exporter.catalog.model import AlertSpec, MetaAlert

META_ALERTS: tuple[MetaAlert, ...] = (
    MetaAlert(AlertSpec("SGLangExporterDown", "5m", "The sglang-exporter sidecar is not being scraped.",
                        "{{ $labels.job }}/{{ $labels.instance }}: Prometheus cannot scrape sglang-exporter.",
                        page=True),
              "critical", "Prometheus has no fresh samples from the sidecar.",
              "Every SGLang health signal and alert of this server is blind."),
    MetaAlert(AlertSpec("SGLangExportersVanished", "5m",
                        "Every sglang-exporter sidecar of a cluster has vanished from Prometheus.",
                        "{{ $labels.cluster }}: none of the {{ $value }} sidecars this cluster had within the "
                        "absence window is scraped any more.", page=True),
              "critical", "Prometheus had sidecar targets in this cluster within the absence window "
                          "(`alerts.absence_window`) and has none now: the cluster, its Prometheus or its "
                          "service discovery went away, or the PodMonitor stopped selecting the pods.",
              "Every SGLang server of the cluster is unwatched: no signal, no page, while the other clusters "
              "look normal (an `absent()` over the whole fleet stays silent)."),
    MetaAlert(AlertSpec("SGLangTargetDown", "5m", "The sglang-exporter sidecar cannot scrape SGLang's /metrics.",
                        "{{ $labels.instance }}: scraping SGLang's /metrics fails ({{ $labels.source }}).",
                        page=True),
              "critical", "The sidecar's last scrapes of SGLang's /metrics failed (the sidecar logs why: "
                          "refused, timeout, http 500, protocol, too large, not an exposition), or none finished "
                          "for 2 x (scrape_interval + scrape_timeout): its scraper is stuck.",
              "SGLang is down, unreachable or replying garbage; metric-fed signals report unknown, and after "
              "scrape_stale_after the values only /metrics gave are no longer exported."),
    MetaAlert(AlertSpec("SGLangLogParserDrift", "30m",
                        "The sglang-exporter sidecar no longer recognises SGLang's log lines.",
                        "{{ $labels.instance }}: {{ $value | humanizePercentage }} of SGLang log records were "
                        "not recognised in the last 30 minutes.", page=False),
              "warning", "Many SGLang-prefixed log lines match no known format: SGLang's log format probably "
                         "changed under us.",
              "Log-fed signals may go silent; the exporter may miss retractions and OOMs.",
              params={"max_unknown_ratio": 0.2}),
    MetaAlert(AlertSpec("SGLangLogStale", "15m", "The sglang-exporter sidecar reads no SGLang log lines.",
                        "{{ $labels.instance }}: no log line was read from {{ $labels.source }} for 15 "
                        "minutes.", page=False),
              "warning", "The followed log file has produced no lines: the hand-off from SGLang's stderr to "
                         "the sidecar may be broken.",
              "Log-fed signals (retractions, OOM, stall, headroom) are blind."),
    MetaAlert(AlertSpec("SGLangLogSourceStale", "5m",
                        "SGLang keeps writing to a log file that was rotated away.",
                        "{{ $labels.instance }}: the file rotated away from {{ $labels.source }} is still being "
                        "written to: the writer never reopens its log.", page=False),
              "warning", "After a rotation, SGLang's output still goes to the old, renamed file (it was started "
                         "as `... > sglang.log` and never reopens): the file at the followed path stays empty.",
              "Nothing is lost while the sidecar runs (it reads the renamed file on), but rotation no longer "
                         "frees disk space, and lines written while the sidecar is down may be lost once "
                         "the renamed file is compressed or deleted."),
    MetaAlert(AlertSpec("SGLangAlertingWatchdog", "0m", "The SGLang alerting pipeline is alive.",
                        "This alert always fires; its absence at the receiver means alerting is broken.",
                        page=False),
              "info", "Always firing, on purpose (a dead man's switch).",
              "If it stops arriving, no other alert can arrive either."),
)
