#!/usr/bin/env bash
# Local stack without Docker, from the Debian packages (apt-get install prometheus prometheus-alertmanager;
# grafana optional): SGLang simulator (or your SGLang) -> sglang-exporter -> Prometheus with alerts/ rules
# -> Alertmanager with alerts/alertmanager.yml; everything on 127.0.0.1.
#
#   deploy/local/run-local-stack.sh [start]   # foreground; Ctrl-C stops everything
#   deploy/local/run-local-stack.sh stop      # from another shell
#
# Environment (all optional):
#   PROM_PORT=9090 AM_PORT=9093 EXPORTER_PORT=10060 SGLANG_PORT=30000 GRAFANA_PORT=3000
#   SCENARIO=retraction_storm  PROFILE=offline
#   SGLANG_URL=http://127.0.0.1:30000 LOG_FILE=/path/sglang.log   # a real SGLang: no simulator is started
#   LOCAL_STACK_DIR=<dir>      # configs, data, logs, pids (default: a fresh temp dir, recorded for `stop`)
#   EXPORTER="/path/to/python -m exporter"   # how to run sglang-exporter (default: this checkout, in the
#                              # project's virtualenv, made by scripts/setup when missing; VENV_DIR as there)
#   NO_GRAFANA=1               # do not start grafana-server even if installed
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PROM_PORT="${PROM_PORT:-9090}"; AM_PORT="${AM_PORT:-9093}"; EXPORTER_PORT="${EXPORTER_PORT:-10060}"
SGLANG_PORT="${SGLANG_PORT:-30000}"; GRAFANA_PORT="${GRAFANA_PORT:-3000}"
SCENARIO="${SCENARIO:-retraction_storm}"; PROFILE="${PROFILE:-offline}"
POINTER="${TMPDIR:-/tmp}/sglang-exporter-local-stack.$(id -u)"

find_bin() { for b in "$@"; do command -v "$b" 2>/dev/null && return 0; done; return 1; }

stop_stack() {  # stop_stack DIR: TERM every recorded process, then KILL what is left after 10 s
  local dir="$1" pids=() pid
  [[ -d "$dir/pids" ]] || return 0
  for f in "$dir"/pids/*; do [[ -e "$f" ]] && pids+=("$(cat "$f")"); done
  ((${#pids[@]})) || return 0
  kill -TERM "${pids[@]}" 2>/dev/null || true
  for _ in $(seq 100); do
    local alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  kill -KILL "${pids[@]}" 2>/dev/null || true
  rm -f "$dir"/pids/*
}

if [[ "${1:-start}" == "stop" ]]; then
  dir="${LOCAL_STACK_DIR:-$(cat "$POINTER" 2>/dev/null || true)}"
  [[ -n "$dir" && -d "$dir" ]] || { echo "no local stack recorded ($POINTER)"; exit 0; }
  if [[ -f "$dir/stack.pid" ]] && kill -0 "$(cat "$dir/stack.pid")" 2>/dev/null; then
    script_pid="$(cat "$dir/stack.pid")"
    kill -TERM "$script_pid"  # its trap stops the services
    for _ in $(seq 150); do kill -0 "$script_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  stop_stack "$dir"
  echo "stopped the local stack in $dir"
  exit 0
fi
[[ "${1:-start}" == "start" ]] || { echo "usage: $0 [start|stop]" >&2; exit 2; }

# the project's environment, not whatever python3 is first on PATH (it lacks prometheus_client & co.)
if [[ -n "${EXPORTER:-}" ]]; then
  read -r -a EXPORTER_CMD <<< "$EXPORTER"
  PY="${PYTHON:-python3}"          # only for the standard-library helpers below
else
  "$REPO/scripts/setup"
  venv="${VENV_DIR:-.venv}"
  [[ "$venv" == /* ]] || venv="$REPO/$venv"
  PY="$venv/bin/python"
  EXPORTER_CMD=("$PY" -m exporter)
fi

PROMETHEUS="$(find_bin prometheus)" || { echo "prometheus not found: apt-get install prometheus" >&2; exit 1; }
ALERTMANAGER="$(find_bin prometheus-alertmanager alertmanager)" || {
  echo "alertmanager not found: apt-get install prometheus-alertmanager" >&2; exit 1; }

DIR="${LOCAL_STACK_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/sglang-exporter-local.XXXXXX")}"
mkdir -p "$DIR"/{pids,logs,prometheus-data,alertmanager-data,sglang}
echo "$DIR" > "$POINTER"
echo $$ > "$DIR/stack.pid"

TICK=""
cleanup() {
  trap - INT TERM EXIT
  [[ -n "$TICK" ]] && kill "$TICK" 2>/dev/null
  echo; echo "stopping the local stack ..."; stop_stack "$DIR"; rm -f "$DIR/stack.pid"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start() {  # start NAME CMD...: run in the background, log to $DIR/logs/NAME.log, record the pid
  local name="$1"; shift
  "$@" >"$DIR/logs/$name.log" 2>&1 &
  echo $! > "$DIR/pids/$name"
}

SIMULATE=1
if [[ -n "${SGLANG_URL:-}" ]]; then
  SIMULATE=0
  LOG="${LOG_FILE:?set LOG_FILE to the SGLang log (see docs/deploy.md) when SGLANG_URL is set}"
else
  SGLANG_URL="http://127.0.0.1:$SGLANG_PORT"
  LOG="$DIR/sglang/sglang.log"
fi

# --- configs in $DIR
"$PY" - "$REPO" "$DIR" "$PROM_PORT" "$AM_PORT" "$EXPORTER_PORT" "$SGLANG_URL" "$GRAFANA_PORT" <<'PY'
import pathlib, sys, urllib.parse
repo, d, prom, am, exp, sglang_url, graf = sys.argv[1:]
repo, d = pathlib.Path(repo), pathlib.Path(d)
text = (repo / "deploy/local/prometheus.yml").read_text()
for default, target in (("9090", f"127.0.0.1:{prom}"), ("9093", f"127.0.0.1:{am}"),
                        ("10060", f"127.0.0.1:{exp}"), ("30000", urllib.parse.urlsplit(sglang_url).netloc)):
    text = text.replace(f"\"127.0.0.1:{default}\"", f"\"{target}\"")
text = text.replace("/etc/prometheus/rules/", f"{repo}/alerts/")
(d / "prometheus.yml").write_text(text)
am_src = repo / "alerts/alertmanager.yml"
(d / "alertmanager.yml").write_text(am_src.read_text() if am_src.exists() else
    "route:\n  receiver: 'null'\nreceivers:\n  - name: 'null'\n")
prov = d / "grafana/provisioning"
for sub in ("datasources", "dashboards", "plugins", "alerting"):
    (prov / sub).mkdir(parents=True, exist_ok=True)
src = repo / "dashboards/provisioning"
if (src / "datasources.yaml").exists():
    (prov / "datasources/datasources.yaml").write_text(
        (src / "datasources.yaml").read_text().replace("127.0.0.1:9090", f"127.0.0.1:{prom}"))
if (src / "dashboards.yaml").exists():
    (prov / "dashboards/dashboards.yaml").write_text(
        (src / "dashboards.yaml").read_text().replace("/var/lib/grafana/dashboards/sglang-exporter",
                                                      str(repo / "dashboards")))
PY

cd "$REPO"
if ((SIMULATE)); then
  start simulator "${EXPORTER_CMD[@]}" simulate --scenario "$SCENARIO" --log-file "$LOG" \
    --metrics-listen "127.0.0.1:$SGLANG_PORT"
fi
start exporter "${EXPORTER_CMD[@]}" serve --log-file "$LOG" --sglang-url "$SGLANG_URL" \
  --listen "127.0.0.1:$EXPORTER_PORT" --profile "$PROFILE"
start alertmanager "$ALERTMANAGER" --config.file="$DIR/alertmanager.yml" \
  --storage.path="$DIR/alertmanager-data" --web.listen-address="127.0.0.1:$AM_PORT" --cluster.listen-address=
start prometheus "$PROMETHEUS" --config.file="$DIR/prometheus.yml" --storage.tsdb.path="$DIR/prometheus-data" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --web.enable-lifecycle
GRAFANA=""
if [[ -z "${NO_GRAFANA:-}" ]] && GRAFANA="$(find_bin grafana-server grafana)"; then
  home="$(dirname "$(dirname "$(readlink -f "$GRAFANA")")")/share/grafana"
  [[ -d "$home" ]] || home=/usr/share/grafana
  [[ "$(basename "$GRAFANA")" == grafana ]] && sub=(server) || sub=()
  GF_SERVER_HTTP_ADDR=127.0.0.1 GF_SERVER_HTTP_PORT="$GRAFANA_PORT" GF_PATHS_DATA="$DIR/grafana/data" \
  GF_PATHS_LOGS="$DIR/grafana/logs" GF_PATHS_PROVISIONING="$DIR/grafana/provisioning" \
  GF_AUTH_ANONYMOUS_ENABLED=true GF_AUTH_ANONYMOUS_ORG_ROLE=Viewer \
    start grafana "$GRAFANA" "${sub[@]}" --homepath "$home"
fi

# --- wait (with a deadline) until Prometheus answers, then print where things are
ready=0
for _ in $(seq 300); do
  for f in "$DIR"/pids/*; do
    kill -0 "$(cat "$f")" 2>/dev/null || { echo "$(basename "$f") exited; its log:" >&2; tail -20 "$DIR/logs/$(basename "$f").log" >&2; exit 1; }
  done
  if "$PY" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" \
      "http://127.0.0.1:$PROM_PORT/-/ready" 2>/dev/null; then ready=1; break; fi
  sleep 0.1
done
((ready)) || { echo "Prometheus did not become ready; see $DIR/logs/prometheus.log" >&2; exit 1; }
# Debian's Prometheus (2.42) is built without the React UI: its pages are only under /classic/
ui=""
if ! "$PY" -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" \
    "http://127.0.0.1:$PROM_PORT/targets" 2>/dev/null; then ui=/classic; fi

cat <<MSG
local stack up (state, configs and logs in $DIR)
  Prometheus    http://127.0.0.1:$PROM_PORT   (targets: $ui/targets, rules: $ui/rules, alerts: $ui/alerts)
  Alertmanager  http://127.0.0.1:$AM_PORT
  exporter      http://127.0.0.1:$EXPORTER_PORT/metrics   /api/v1/signals
  SGLang        $SGLANG_URL/metrics   (log: $LOG)
MSG
[[ -n "$GRAFANA" ]] && echo "  Grafana       http://127.0.0.1:$GRAFANA_PORT   (anonymous viewer; dashboards in folder SGLang)"
echo "Ctrl-C (or: $0 stop) stops everything."

# --- stay in the foreground until a service dies or we are told to stop
while :; do
  for f in "$DIR"/pids/*; do
    [[ -e "$f" ]] || continue
    kill -0 "$(cat "$f")" 2>/dev/null || { echo "$(basename "$f") exited; see $DIR/logs/$(basename "$f").log" >&2; exit 1; }
  done
  sleep 1 & TICK=$!
  wait "$TICK" || true; TICK=""
done
