# syntax=docker/dockerfile:1
# sglang-exporter: the sidecar image (docs/deploy.md "The image"). Build with the docker format, which keeps
# the HEALTHCHECK (OCI image configs have no field for it; buildah and podman build OCI by default):
#   docker build -t sglang-exporter:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#   buildah build --format docker -t sglang-exporter:0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
# Runs as 65532:65532 with a read-only root filesystem (no writes needed); no shell is used at run time.
# Arguments are a full command line: `serve --log-file ...` (CMD: `serve`, configured by environment alone).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/sglang-exporter
COPY deploy/docker/requirements.txt deploy/docker/build-requirements.txt /tmp/
RUN /opt/sglang-exporter/bin/pip install --only-binary=:all: -r /tmp/requirements.txt -r /tmp/build-requirements.txt
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# The pinned backend builds the package (no isolated build environment fetching its own); then the installers
# leave: the runtime venv holds the package and its three dependencies only.
RUN /opt/sglang-exporter/bin/pip install --no-deps --no-build-isolation . \
 && /opt/sglang-exporter/bin/pip uninstall --yes --quiet setuptools pip \
 && /opt/sglang-exporter/bin/python -m compileall -q /opt/sglang-exporter/lib

FROM ${PYTHON_IMAGE}
# an ARG declared before the first FROM is out of scope after each FROM until declared again
ARG PYTHON_IMAGE
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
# Probes /healthz where the running serve listens, wherever that was set (flag, environment, config file):
# `healthcheck` reads serve's command line from /proc (exporter/cli/healthcheck.py). Python, not curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
  CMD ["sglang-exporter", "healthcheck"]
ENTRYPOINT ["sglang-exporter"]
CMD ["serve"]
