#!/usr/bin/env bash
# A real Prometheus on loopback, to scrape the operator and the workers of a local run so the
# Grafana dashboard's own queries can be evaluated (scripts/render-dashboard.py). Built from the Go
# module proxy (github.com/prometheus/prometheus, Apache-2.0) without the web UI assets: the HTTP
# API is all we use. One scrape job, targets from a file_sd JSON file that callers rewrite
# (tests/services/prometheus-targets.py); Prometheus rereads it every second.
#
#   tests/services/prometheus.sh install   build (or reuse) the binary
#   tests/services/prometheus.sh start     install, start on a fresh data dir, wait until ready,
#                                          print the URL
#   tests/services/prometheus.sh stop      stop exactly what start started (data and targets stay)
#   tests/services/prometheus.sh env       print SK_PROMETHEUS_URL=... and SK_PROMETHEUS_TARGETS=...
#
# Target groups in the targets file set their own labels: `namespace`, `pod` and `job_name` for
# worker pods, and `__job` to set the `job` label (the operator's series get
# job="streamkeeper-operator", the workers' job="streamkeeper-workers"); without `__job` a series
# gets job="streamkeeper", the scrape job's name.
source "$(dirname "$0")/lib.sh"

# The module's v0.3xx.y tags are Prometheus 3.xx.y (its VERSION file says which).
PROMETHEUS_VERSION="${SK_PROMETHEUS_VERSION:-v0.316.0}"
BIN="$SK_CACHE/prometheus/$PROMETHEUS_VERSION/bin"
PROMETHEUS="$BIN/prometheus"
STATE="$SK_RUN/prometheus"
PORT="${SK_PROMETHEUS_PORT:-19090}"
URL="http://127.0.0.1:$PORT"
SCRAPE_INTERVAL="${SK_PROMETHEUS_SCRAPE_INTERVAL:-1s}"
TARGETS="$STATE/targets.json"
CONFIG="$STATE/prometheus.yml"
PIDFILE="$STATE/prometheus.pid"
LOG="$STATE/prometheus.log"
# wait_until silences its check; keep a handle on stderr so a check can still say why it gave up.
exec {ERR_FD}>&2

install() {
  if [[ -x $PROMETHEUS ]]; then
    return 0
  fi
  go_env
  local home="$SK_CACHE/prometheus/$PROMETHEUS_VERSION"
  mkdir -p "$home" "$BIN"
  # Cold build measured on 2 cores beside a running CI build: 206 s, module downloads included
  # (the Go build cache already held the standard library from kube.sh's build).
  log "building Prometheus $PROMETHEUS_VERSION (cmd/prometheus) from the Go module proxy (cold: ~4 min on 2 cores)"
  local dir
  dir=$(cd "$home" && go mod download -json "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" \
    | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -f $dir/VERSION ]] || die "could not download github.com/prometheus/prometheus@$PROMETHEUS_VERSION"
  local version ldflags="-s -w" pkg=github.com/prometheus/common/version
  version=$(cat "$dir/VERSION")
  ldflags+=" -X $pkg.Version=$version -X $pkg.Revision=$PROMETHEUS_VERSION -X $pkg.Branch=HEAD"
  ldflags+=" -X $pkg.BuildUser=streamkeeper -X $pkg.BuildDate=19700101-00:00:00"
  # The module has no replace directives, so `go install pkg@version` builds it as released.
  # remove_all_sd leaves out the cloud service discoveries (file_sd and http_sd stay); without
  # the builtinassets tag the UI is not embedded (its routes answer 404, the API is unaffected).
  (
    cd "$home"
    GOBIN="$BIN" go install -trimpath -tags remove_all_sd -ldflags "$ldflags" \
      "github.com/prometheus/prometheus/cmd/prometheus@$PROMETHEUS_VERSION"
  ) || die "building Prometheus $PROMETHEUS_VERSION failed"
  [[ -x $PROMETHEUS ]] || die "the build left no $PROMETHEUS"
  log "built $("$PROMETHEUS" --version 2>&1 | head -1)"
}

write_config() {
  cat > "$CONFIG" <<YAML
global:
  scrape_interval: $SCRAPE_INTERVAL
  scrape_timeout: $SCRAPE_INTERVAL
  evaluation_interval: $SCRAPE_INTERVAL
scrape_configs:
  - job_name: streamkeeper
    # A static text file or an older client may send no usable Content-Type.
    fallback_scrape_protocol: PrometheusText0.0.4
    file_sd_configs:
      - files: [$TARGETS]
        refresh_interval: 1s
    # file_sd labels (namespace, pod, job_name) become target labels as they are; labels starting
    # with __ are dropped after relabeling, so __job only serves to set job per target group.
    relabel_configs:
      - source_labels: [__job]
        regex: (.+)
        target_label: job
YAML
}

running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

# One readiness probe; gives up on the whole start at once if Prometheus has exited.
ready() {
  running || die "Prometheus exited during startup; see $LOG" 2>&"$ERR_FD"
  curl -sf --max-time 5 "$URL/-/ready" >/dev/null
}

start() {
  install
  if running; then
    log "already running"; echo "$URL"; return 0
  fi
  require_free_port "$PORT"
  rm -rf "$STATE/data"
  mkdir -p "$STATE"
  [[ -f $TARGETS ]] || echo '[]' > "$TARGETS"
  write_config
  nohup "$PROMETHEUS" --config.file="$CONFIG" --storage.tsdb.path="$STATE/data" \
    --storage.tsdb.retention.time=7d --web.listen-address="127.0.0.1:$PORT" \
    --log.level=warn > "$LOG" 2>&1 {ERR_FD}>&- &
  echo $! > "$PIDFILE"
  wait_until 60 "Prometheus" ready \
    || die "Prometheus did not answer $URL/-/ready within 60 s; see $LOG"
  log "Prometheus $PROMETHEUS_VERSION at $URL, scraping every $SCRAPE_INTERVAL the targets in $TARGETS"
  echo "$URL"
}

stop() {
  stop_pidfile "$PIDFILE" prometheus
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  env)
    echo "SK_PROMETHEUS_URL=$URL"
    echo "SK_PROMETHEUS_TARGETS=$TARGETS"
    ;;
  *) die "usage: $0 install|start|stop|env" ;;
esac
