#!/usr/bin/env bash
# The simulated workers of the fleet bench: test-tools/fleet-workers answers the worker HTTP
# contract for every worker pod KWOK runs (tests/services/kwok.sh), each on the pod's own
# loopback address, and takes faults on a control API (its routes: test-tools/fleet-workers/src/control.rs).
# kube.sh must be started first; kwok.sh before any pod can be served.
#
#   tests/services/fleet-workers.sh start   start it, wait until its control API answers
#   tests/services/fleet-workers.sh stop    stop exactly what start started
#   tests/services/fleet-workers.sh env     print SK_FLEET_CONTROL=... (one VAR=value a line)
#
# The binary is the workspace's (cargo build -p streamkeeper-fleet-workers; --release for a
# bench: a debug build spends ~0.1 ms of CPU per request); SK_FLEET_WORKERS_BIN overrides it.
source "$(dirname "$0")/lib.sh"

STATE="$SK_RUN/fleet-workers"
CONTROL_PORT="${SK_FLEET_CONTROL_PORT:-18090}"
# Each pod holds a listening socket, and each call of the operator a connection for its time:
# 4,000 pods need about 2 descriptors each at the peak of a poll round.
MIN_OPEN_FILES="${SK_FLEET_MIN_OPEN_FILES:-9000}"

binary() {
  local target="${CARGO_TARGET_DIR:-$SK_CACHE/cargo-target}" binary
  binary="${SK_FLEET_WORKERS_BIN:-}"
  if [[ -z $binary ]]; then
    binary="$target/release/streamkeeper-fleet-workers"
    [[ -x $binary ]] || binary="$target/debug/streamkeeper-fleet-workers"
  fi
  [[ -x $binary ]] || die "no $binary: build it first (cargo build --release -p streamkeeper-fleet-workers)"
  echo "$binary"
}

start() {
  mkdir -p "$STATE"
  if [[ -f $STATE/fleet-workers.pid ]] && kill -0 "$(cat "$STATE/fleet-workers.pid")" 2>/dev/null; then
    log "already running"; return 0
  fi
  local line
  while IFS= read -r line; do export "${line?}"; done < <("$(dirname "$0")/kube.sh" env)
  "$SK_KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG" get --raw /readyz >/dev/null 2>&1 \
    || die "the test apiserver does not answer: run tests/services/kube.sh start first"
  require_free_port "$CONTROL_PORT"
  local bin
  bin=$(binary)
  # The process cannot raise its own limit without unsafe code: its shell does, to the hard
  # limit, and the process refuses to start below the minimum.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  (( $(ulimit -n) >= MIN_OPEN_FILES )) \
    || die "the open-file limit is $(ulimit -n) (hard $(ulimit -Hn)), below $MIN_OPEN_FILES: raise the hard limit (limits.conf, or ulimit -Hn as root)"
  nohup "$bin" --control "127.0.0.1:$CONTROL_PORT" --min-open-files "$MIN_OPEN_FILES" \
    > "$STATE/fleet-workers.log" 2>&1 &
  echo $! > "$STATE/fleet-workers.pid"
  wait_until 30 "fleet workers" curl -sf "http://127.0.0.1:$CONTROL_PORT/healthz" \
    || die "the fleet workers did not start; see $STATE/fleet-workers.log"
}

stop() {
  stop_pidfile "$STATE/fleet-workers.pid" fleet-workers
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "SK_FLEET_CONTROL=http://127.0.0.1:$CONTROL_PORT" ;;
  *) die "usage: $0 start|stop|env" ;;
esac
