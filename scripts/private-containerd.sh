# shellcheck shell=bash
# A private containerd for checking images built without Docker: its own root, state, socket and
# log under $CHECK_DIR (set before sourcing; one folder per caller, so two checks never share
# one), nothing of the machine's own (/run/containerd, /var/lib/containerd) used or touched.
# Sourced by scripts/oci-image.sh and tests/e2e/images.sh, after tests/services/lib.sh.
#
#   start_containerd   stops a previous one of this $CHECK_DIR, starts a fresh one, waits for it
#   stop_containerd    kills every task it runs (all started by the caller: it is private), stops
#                      it, removes $CHECK_DIR
#   pctr ...           ctr against it, in the k8s.io namespace (the kubelet's)
SOCKET=$CHECK_DIR/containerd.sock

pctr() { ctr -a "$SOCKET" -n k8s.io "$@"; }

start_containerd() {
  if ! command -v containerd >/dev/null || ! command -v runc >/dev/null; then
    die "containerd and runc are missing: apt-get install containerd runc"
  fi
  stop_containerd
  mkdir -p "$CHECK_DIR"
  # The CRI plugin (what a kubelet talks to) would otherwise write negative oom_score_adj values,
  # which some VMs refuse (EIO: "can't get final child's PID from pipe"); ctr does not need it.
  cat > "$CHECK_DIR/config.toml" <<EOF
version = 2
root = "$CHECK_DIR/root"
state = "$CHECK_DIR/state"
[grpc]
  address = "$SOCKET"
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
EOF
  containerd --config "$CHECK_DIR/config.toml" > "$CHECK_DIR/containerd.log" 2>&1 &
  echo $! > "$CHECK_DIR/pid"
  if ! wait_until 30 "private containerd" ctr -a "$SOCKET" version; then
    tail -20 "$CHECK_DIR/containerd.log" >&2
    stop_containerd
    die "the private containerd did not answer within 30 s (its log above)"
  fi
}

# no_task <id>: the container has no task left (polled after a kill).
no_task() { ! pctr tasks ls -q | grep -qx "$1"; }

# Kills and deletes the private containerd's tasks and containers. Its shims outlive containerd
# itself, so they are stopped through it first.
stop_tasks() {
  [[ -S $SOCKET ]] && ctr -a "$SOCKET" version >/dev/null 2>&1 || return 0
  local id
  for id in $(pctr tasks ls -q); do
    pctr tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    wait_until 30 "the end of task $id" no_task_running "$id" || true
    pctr tasks delete "$id" >/dev/null 2>&1 || true
    wait_until 30 "the removal of task $id" no_task "$id" \
      || die "task $id of the private containerd did not go away; see $CHECK_DIR/containerd.log"
  done
  for id in $(pctr containers ls -q); do
    pctr containers delete "$id" >/dev/null 2>&1 || die "could not delete container $id"
  done
}

# no_task_running <id>: the task exists no more, or has stopped.
no_task_running() {
  ! pctr tasks ls | awk -v id="$1" '$1 == id && $3 != "STOPPED" { found = 1 } END { exit !found }'
}

stop_containerd() {
  stop_tasks
  stop_pidfile "$CHECK_DIR/pid" "private containerd"
  if grep -q " $CHECK_DIR/" /proc/self/mounts; then
    die "mounts under $CHECK_DIR remain (grep $CHECK_DIR /proc/self/mounts); not removing it"
  fi
  rm -rf "$CHECK_DIR"
}
