#!/usr/bin/env bash
# The test command: installs what is missing, builds, starts the real services (Kafka, S3,
# Kubernetes control plane) on loopback, runs the whole workspace's tests, stops the services,
# then runs the end-to-end scenario on a real node (kubelet, containerd; tests/e2e/real-node.sh).
#
#   tests/run.sh                      everything (what CI runs)
#   tests/run.sh --test kafka_smoke   one group: any arguments go to `cargo test`, no end-to-end
#
# Caches (cargo target dir, Go builds, Kafka jars, SeaweedFS) live in
# ${STREAMKEEPER_CACHE:-~/.cache/streamkeeper}, shared by every clone on the machine.
source "$(dirname "$0")/services/lib.sh"
cd "$(dirname "$0")/.."
services=tests/services
started=()

"$(dirname "$0")/install-prerequisites.sh"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$SK_CACHE/cargo-target}"
mkdir -p "$SK_RUN/logs"

# Service installs (a cold Go build of the control plane is the longest) run beside the Rust build;
# helm is a client only (its start and stop do nothing) but is installed and exported the same way.
# The real node's kubelet builds in the control plane's Go module, so after it, in the same job.
declare -A installs=()
for service in kube kafka s3 helm; do
  if [[ $service == kube ]]; then
    { "$services/kube.sh" install && "$services/node.sh" install; } > "$SK_RUN/logs/install-$service.log" 2>&1 &
  else
    "$services/$service.sh" install > "$SK_RUN/logs/install-$service.log" 2>&1 &
  fi
  installs[$service]=$!
done
# The example WebAssembly guests the tests run (and their tools' first install: componentize-py,
# and wasm-tools and wit-bindgen with `cargo install`, minutes cold) build beside the compile too,
# where the tests look for them; a test that calls the script after finds them built.
examples/wasm/build.sh "$CARGO_TARGET_DIR/tmp/wasm-guests" > "$SK_RUN/logs/wasm-guests.log" 2>&1 &
guests=$!

stop_services() {
  local status=$?
  for service in "${started[@]}"; do "$services/$service.sh" stop || true; done
  exit "$status"
}
trap stop_services EXIT
trap 'exit 130' INT TERM

step() { log "== $* ($(date +%T))"; }

step "cargo fmt --check"
cargo fmt --all -- --check || die "code is not formatted: run cargo fmt --all"
step "markdown links"
scripts/check-links.py || die "a Markdown link is broken or README.md is over 200 lines (list above)"
step "cargo build (cold: ~35 min on 2 cores)"
cargo build --workspace --all-targets --locked
step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo doc (no warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

for service in kube kafka s3 helm; do
  wait "${installs[$service]}" || { cat "$SK_RUN/logs/install-$service.log" >&2; die "installing $service failed (log above)"; }
done

wait "$guests" || { cat "$SK_RUN/logs/wasm-guests.log" >&2; die "building the example WebAssembly guests failed (log above)"; }

for service in kafka s3 kube helm; do
  step "starting $service"
  started+=("$service")
  "$services/$service.sh" start || die "$service did not start; the tests need the real service"
  while IFS= read -r line; do export "${line?}"; done < <("$services/$service.sh" env)
done

step "cargo test"
status=0
cargo test --workspace --locked --no-fail-fast "$@" || status=$?

# The end-to-end scenario on the real node has its own control plane profile and runs Kafka and
# S3 as pods: the services above stop first. A run of one test group (arguments) skips it.
if (( $# == 0 )); then
  for service in "${started[@]}"; do "$services/$service.sh" stop || true; done
  started=()
  step "end-to-end on the real node (tests/e2e/real-node.sh)"
  tests/e2e/real-node.sh || status=$?
fi
exit "$status"
