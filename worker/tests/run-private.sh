#!/usr/bin/env bash
# Builds the worker tests, copies the worker binary to a private path (another worktree's build
# may replace the shared target directory's binary mid-run) and runs `cargo test` with it.
# Usage: worker/tests/run-private.sh --test checkpoints [-- filter]
set -euo pipefail
export PATH=$HOME/.cargo/bin:/usr/local/go/bin:$PATH
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/streamkeeper/cargo-target}
cd "$(dirname "$0")/../.."
cargo test --workspace --locked --no-run "$@" 2>&1 | tail -2
private=$(mktemp -d)/streamkeeper-worker
cargo build --workspace --locked --bin streamkeeper-worker 2>&1 | tail -1
cp "$CARGO_TARGET_DIR/debug/streamkeeper-worker" "$private"
export STREAMKEEPER_WORKER_BIN=$private
cargo test --workspace --locked "$@"
