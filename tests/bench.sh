#!/usr/bin/env bash
# Benchmarks against the real services on loopback; each prints its figures and writes its JSON
# (bench-results/<name>.json; failover, warmup and fleet: $CARGO_TARGET_DIR/bench/<name>.json).
#
#   tests/bench.sh            every bench
#   tests/bench.sh worker     one of: worker, join, checkpoint_restore, checkpoint_overhead,
#                             wasm, assignment, failover, warmup, fleet
#
# Services this script starts are stopped when it ends; services already running are left alone.
source "$(dirname "$0")/services/lib.sh"
cd "$(dirname "$0")/.."
services=tests/services
"$(dirname "$0")/install-prerequisites.sh"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$SK_CACHE/cargo-target}"

benches=("$@")
(( ${#benches[@]} )) || benches=(worker join checkpoint_restore checkpoint_overhead wasm assignment failover warmup fleet)
declare -A needs=([worker]="kafka" [join]="kafka" [checkpoint_restore]="s3" [checkpoint_overhead]="kafka s3" [wasm]="kafka s3" [assignment]="" [failover]="kafka s3 kube" [warmup]="kafka s3 kube" [fleet]="kafka s3 kube")
declare -A ports=([kafka]=19092 [s3]=18333 [kube]=16443)

started=()
stop_services() {
  local status=$? index
  # In reverse: the fleet's simulated nodes are deleted through the apiserver before it stops.
  for (( index = ${#started[@]} - 1; index >= 0; index-- )); do
    "$services/${started[index]}.sh" stop || true
  done
  exit "$status"
}
trap stop_services EXIT
trap 'exit 130' INT TERM

wanted=()
for bench in "${benches[@]}"; do
  [[ -n ${needs[$bench]+x} ]] || die "unknown bench '$bench' (known: ${!needs[*]})"
  for service in ${needs[$bench]}; do
    [[ " ${wanted[*]} " == *" $service "* ]] || wanted+=("$service")
  done
done
for service in "${wanted[@]}"; do
  port_answers "${ports[$service]}" || started+=("$service")
  "$services/$service.sh" start || die "$service did not start; the benches need the real service"
  while IFS= read -r line; do export "${line?}"; done < <("$services/$service.sh" env)
done

for bench in "${benches[@]}"; do
  if [[ $bench == assignment ]]; then
    # Pure CPU in the contract crate: its release build takes seconds, not the workspace's.
    log "== bench $bench ($(date +%T))"
    cargo bench --locked -p streamkeeper-contract --bench assignment
    continue
  fi
  if [[ $bench == failover || $bench == warmup || $bench == fleet ]]; then
    # The whole system on the test build (worker, node agent and operator binaries): the time
    # is Kafka round trips, fencing and the heartbeat, not CPU; the dev profile shares the
    # test command's compile. (fleet: the operator as the tests run it; its CPU is a debug
    # build's.)
    log "== bench $bench ($(date +%T)); a few minutes per scenario"
    cargo build --workspace --all-targets --locked
    if [[ $bench == fleet ]]; then
      # The fleet's pods run on KWOK's simulated nodes, and one process answers for their workers
      # (test-tools/fleet-workers); only this bench uses either, so both stop when it ends.
      for service in kwok fleet-workers; do
        started+=("$service")
        "$services/$service.sh" start || die "$service did not start; the fleet bench needs it"
        while IFS= read -r line; do export "${line?}"; done < <("$services/$service.sh" env)
      done
    fi
    cargo bench --workspace --locked --profile dev --bench "$bench"
    continue
  fi
  log "== bench $bench ($(date +%T)); release build, cold: ~20-30 min"
  cargo bench --workspace --locked --bench "$bench"
done
