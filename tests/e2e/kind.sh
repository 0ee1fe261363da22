#!/usr/bin/env bash
# End-to-end on kind: the images, the Helm chart and the example job in a real cluster.
#
#   tests/e2e/kind.sh          create the cluster (kind-config.yaml), run the scenario, delete the cluster
#   tests/e2e/kind.sh --keep   leave the cluster running afterwards (kubectl --context kind-streamkeeper-e2e)
#
# It builds the operator and worker images (scripts/images.sh build), loads them into kind, and
# runs the scenario of tests/e2e/scenario.sh (the one tests/e2e/real-node.sh runs on this
# machine's real node): Kafka and S3 as pods, `helm install`, the example job, a worker
# force-deleted mid-stream, the output exact read_committed, the moves in status and Events.
#
# Needs Docker (an engine that answers), kind, kubectl and helm. Without them it SKIPS (exit 0)
# with a loud message: it cannot run on a machine without a container engine.
source "$(dirname "$0")/../services/lib.sh"
cd "$(dirname "$0")/../.."
source tests/e2e/scenario.sh

CLUSTER="${SK_KIND_CLUSTER:-streamkeeper-e2e}"
KEEP=false
[[ ${1:-} == --keep ]] && KEEP=true

skip() {
  printf '\n%s\n' "************************************************************************" >&2
  printf '*** SKIPPED: tests/e2e/kind.sh did NOT run: %s\n' "$1" >&2
  printf '*** %s\n' "It needs a Docker engine, kind, kubectl and helm; nothing was tested." >&2
  printf '%s\n\n' "************************************************************************" >&2
  exit 0
}
command -v docker >/dev/null || skip "docker is not installed"
docker info >/dev/null 2>&1 || skip "no Docker engine answers (docker info failed)"
command -v kind >/dev/null || skip "kind is not installed (go install sigs.k8s.io/kind@latest)"
if command -v kubectl >/dev/null; then KUBECTL=kubectl
elif [[ -x ${SK_KUBE_BIN:-}/kubectl ]]; then KUBECTL=$SK_KUBE_BIN/kubectl
else skip "kubectl is not installed"; fi
if command -v helm >/dev/null; then HELM=helm
else
  tests/services/helm.sh install || skip "helm is not installed and could not be built"
  HELM=$(tests/services/helm.sh env | sed -n 's/^SK_HELM=//p')
fi

kubectl() { "$KUBECTL" --context "kind-$CLUSTER" "$@"; }
helm() { "$HELM" --kube-context "kind-$CLUSTER" "$@"; }

created=false
cleanup() {
  local status=$?
  if (( status != 0 )); then
    log "FAILED (status $status); the cluster's state:"
    kubectl get ssj,sts,pods -A -o wide 2>/dev/null || true
    kubectl -n streamkeeper-system logs -l app.kubernetes.io/name=streamkeeper-operator --tail 50 2>/dev/null || true
  fi
  if $created && ! $KEEP; then kind delete cluster --name "$CLUSTER" || true; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "kind cluster $CLUSTER (kind-config.yaml: 1 control plane, 2 workers in zone-a and zone-b)"
if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config kind-config.yaml --wait 120s
  created=true
fi

step "building the images and loading them into kind"
scripts/images.sh build
mapfile -t images < <(scripts/images.sh names)
for image in "${images[@]}"; do kind load docker-image "$image" --name "$CLUSTER"; done

PROVIDER=kind
provider_manifest() { cat "$1"; }
run_scenario
