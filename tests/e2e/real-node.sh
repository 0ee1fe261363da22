#!/usr/bin/env bash
# End-to-end on this machine's real node: the scenario of tests/e2e/scenario.sh (the one
# tests/e2e/kind.sh runs on kind) with pods run by a real kubelet, containerd and runc.
#
#   tests/e2e/real-node.sh          start the control plane (node profile) and the node, run the
#                                   scenario, stop what it started
#   tests/e2e/real-node.sh --keep   leave them running afterwards (KUBECONFIG from
#                                   tests/services/kube.sh env; stop with tests/services/node.sh stop)
#
# 1. tests/services/kube.sh with SK_KUBE_PROFILE=node, and tests/services/node.sh (needs root);
# 2. the operator and worker images (scripts/oci-image.sh build, from the binaries the workspace
#    build made) and the Kafka and SeaweedFS stand-ins (tests/e2e/images.sh build), all imported
#    into the node's containerd: the node has no registry to pull from;
# 3. the scenario, with tests/e2e/manifests applied as they are but for the stand-in images.
# Fails loudly when a piece does not come up; it never skips.
source "$(dirname "$0")/../services/lib.sh"
cd "$(dirname "$0")/../.."
source tests/e2e/scenario.sh

KEEP=false
[[ ${1:-} == --keep ]] && KEEP=true
[[ $(id -u) -eq 0 ]] || die "the real node needs root (containerd, runc, the bridge, iptables)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$SK_CACHE/cargo-target}"

started=()
cleanup() {
  local status=$?
  if (( status != 0 )); then
    log "FAILED (status $status); the cluster's state:"
    kubectl get nodes,ssj,sts,pods -A -o wide 2>/dev/null || true
    kubectl -n streamkeeper-system logs deployment/streamkeeper --tail 40 2>/dev/null || true
    kubectl -n "$NS" get events --sort-by=.lastTimestamp 2>/dev/null | tail -30 || true
    # The workers' side of a move: restarts and probe failures, and what each process logged.
    local pod
    for pod in $(kubectl -n "$NS" get pods -o name 2>/dev/null); do
      kubectl -n "$NS" describe "$pod" 2>/dev/null | sed -n '/^Containers:/,/^Conditions:/p;/^Events:/,$p' || true
      kubectl -n "$NS" logs "$pod" --previous --tail 40 2>/dev/null | sed "s|^|$pod (previous) |" || true
      kubectl -n "$NS" logs "$pod" --tail 80 2>/dev/null | sed "s|^|$pod |" || true
    done
    kubectl -n streamkeeper-system logs deployment/streamkeeper 2>/dev/null \
      | grep -E 'romot|silent|no answer|handoff|HandedOff' | tail -40 || true
    log "node logs: $SK_RUN/node (kubelet.log, containerd.log, coredns.log, kube-proxy.log)"
  fi
  if ! $KEEP; then
    local service
    for service in "${started[@]}"; do tests/services/"$service".sh stop || true; done
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "the control plane (node profile) and the real node"
started=(kube "${started[@]}")
SK_KUBE_PROFILE=node tests/services/kube.sh start >/dev/null || die "the control plane did not start"
while IFS= read -r line; do export "${line?}"; done < <(tests/services/kube.sh env)
started=(node "${started[@]}")
tests/services/node.sh start || die "the real node did not come up"
KUBECTL="$SK_KUBE_BIN/kubectl"
HELM=$(tests/services/helm.sh env | sed -n 's/^SK_HELM=//p')
[[ -x $HELM ]] || { tests/services/helm.sh install && HELM=$(tests/services/helm.sh env | sed -n 's/^SK_HELM=//p'); }
kubectl() { "$KUBECTL" "$@"; }
helm() { "$HELM" "$@"; }
kubectl get nodes -o wide

step "the images, imported into the node's containerd"
scripts/oci-image.sh build
tests/e2e/images.sh build
mapfile -t archives < <(scripts/oci-image.sh paths; tests/e2e/images.sh paths)
tests/services/node.sh load "${archives[@]}"

PROVIDER="real node (kubelet $("$SK_KUBE_BIN/kubelet" --version | cut -d' ' -f2), containerd, runc)"
provider_manifest() { tests/e2e/images.sh rewrite "$1"; }
run_scenario
