# syntax=docker/dockerfile:1
# sglang-exporter: the sidecar image. Build: docker build -t sglang-exporter:0.1.0 .
# Runs as 65532:65532 with a read-only root filesystem (no writes needed); no shell is used at run time.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/sglang-exporter
COPY deploy/docker/requirements.txt /tmp/requirements.txt
RUN /opt/sglang-exporter/bin/pip install --only-binary=:all: -r /tmp/requirements.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
RUN /opt/sglang-exporter/bin/pip install --no-deps . \
 && /opt/sglang-exporter/bin/python -m compileall -q /opt/sglang-exporter/lib

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="sglang-exporter" \
      org.opencontainers.image.description="Health signals, tuning advice, alerts and dashboards for SGLang servers, from their logs and /metrics" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/sglang-exporter/sglang-exporter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"
COPY --from=build /opt/sglang-exporter /opt/sglang-exporter
ENV PATH=/opt/sglang-exporter/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
EXPOSE 10060
# python, not curl (the slim image has none); follows SGLANG_EXPORTER_LISTEN if the port is changed.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["python", "-c", "import os, urllib.request; port = os.environ.get('SGLANG_EXPORTER_LISTEN', ':10060').rpartition(':')[2]; urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4)"]
ENTRYPOINT ["sglang-exporter", "serve"]
