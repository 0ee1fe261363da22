#!/usr/bin/env bash
# Simulated nodes for the fleet bench: KWOK (sigs.k8s.io/kwok) on the test control plane of
# kube.sh. Its fake nodes have a pod CIDR inside 127.0.0.0/8, so every simulated pod's IP is a
# loopback address of this machine, where test-tools/fleet-workers answers for it. No kubelet
# and no process per pod: KWOK only writes node and pod status.
#
#   tests/services/kwok.sh install   build (or reuse) the kwok binary and its stages
#   tests/services/kwok.sh start     install, start kwok, create the nodes, wait until Ready
#   tests/services/kwok.sh stop      delete the nodes and stop exactly what start started
#   tests/services/kwok.sh env       print SK_KWOK_NODES=... (one VAR=value a line)
#
# A pod runs on these nodes only with the toleration below and `nodeSelector: {type: kwok}`; the
# taint keeps every other test's pod off them. kube.sh must be started first.
source "$(dirname "$0")/lib.sh"

KWOK_VERSION="${SK_KWOK_VERSION:-v0.8.0}"
HOME_DIR="$SK_CACHE/kwok/$KWOK_VERSION"
BIN="$HOME_DIR/bin"
STAGES="$HOME_DIR/stages.yaml"
STATE="$SK_RUN/kwok"
NODES="${SK_KWOK_NODES:-8}"
# Each node takes this many pods; 8 nodes of 1,000 hold the fleet's 4,000 with room to spare.
PODS_PER_NODE="${SK_KWOK_PODS_PER_NODE:-1000}"
NODE_LABEL="type=kwok"
TAINT_KEY="streamkeeper.dev/simulated"
ZONES=(zone-a zone-b)

# KWOK's default stages, as kwokctl embeds them (kustomize/stage/ in its module): nodes become
# Ready and keep a heartbeat, pods go Running and Ready with an IP from their node's pod CIDR, a
# deleted pod is removed (no kubelet finishes the deletion). pod-complete is for Job pods.
STAGE_FILES=(node/fast/node-initialize.yaml node/heartbeat/node-heartbeat.yaml
  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml)

install() {
  if [[ -x $BIN/kwok && -s $STAGES ]]; then return 0; fi
  go_env
  mkdir -p "$BIN"
  log "building kwok $KWOK_VERSION from the Go module proxy (cold: ~3 min on 2 cores, downloads included)"
  # sigs.k8s.io/kwok has no replace directives, so `go install pkg@version` works without the
  # wrapper module kube.sh needs; it refuses the -mod=mod that go_env sets.
  GOFLAGS='' GOBIN="$BIN" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    || die "building kwok $KWOK_VERSION failed"
  "$BIN/kwok" --version >&2 || die "the built kwok does not run"
  # The stages ship in the module's source, not in the binary: without them kwok refuses to
  # start ("no stages found"), and our apiserver has no Stage CRD to hold them instead.
  local dir
  dir=$(GOFLAGS='' go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $dir/kustomize/stage ]] || die "could not find kwok's stages in the module cache ($dir)"
  local file
  for file in "${STAGE_FILES[@]}"; do
    echo "---"
    cat "$dir/kustomize/stage/$file"
  done > "$STAGES.tmp"
  mv "$STAGES.tmp" "$STAGES"
}

# kubectl <args...>: the control plane's kubectl against the test apiserver.
kubectl() {
  "$SK_KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG" "$@"
}

# require_control_plane: reads kube.sh's environment and checks that its apiserver answers.
require_control_plane() {
  local line
  while IFS= read -r line; do export "${line?}"; done < <("$(dirname "$0")/kube.sh" env)
  [[ -x $SK_KUBE_BIN/kubectl && -f $KUBECONFIG ]] \
    || die "the test control plane is not installed or never started: run tests/services/kube.sh start first"
  kubectl get --raw /readyz >/dev/null 2>&1 \
    || die "the test apiserver does not answer ($KUBECONFIG): run tests/services/kube.sh start first"
}

write_config() {
  {
    cat <<CONFIG
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  # Only our nodes: a real kubelet's node (node.sh) on the same control plane is left alone.
  manageNodesWithLabelSelector: "$NODE_LABEL"
  # The nodes' InternalIP and so the pods' hostIP. Pod IPs come from each node's spec.podCIDR;
  # this cidr is used only for a node without one, and ours all have one.
  nodeIP: 127.0.0.1
  cidr: 127.9.0.0/16
  # A KwokConfiguration read from a file is not defaulted (v0.8.0): a parallelism left out is 0,
  # and kwok refuses to start. Pods take one at a time: v0.8.0 creates a node's IP pool without
  # a lock (PodController.ipPool: Load, then Store), so two pods played at once on a fresh node
  # can both get its first address (seen here with 16). One is enough: the scheduler (50 binds
  # a second at its default client QPS) is slower than kwok anyway.
  podPlayStageParallelism: 1
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
CONFIG
    cat "$STAGES"
  } > "$STATE/kwok.yaml"
}

# node_manifest <index>: one fake node. Its status is kept on create (nodes allow it); KWOK's
# node-initialize stage keeps the capacity given here and adds conditions and addresses.
node_manifest() {
  local n=$1
  cat <<NODE
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$n
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-node-$n
    kubernetes.io/os: linux
    topology.kubernetes.io/zone: ${ZONES[n % ${#ZONES[@]}]}
spec:
  podCIDR: 127.$((10 + n)).0.0/16
  podCIDRs: [127.$((10 + n)).0.0/16]
  taints:
  - {key: $TAINT_KEY, value: "true", effect: NoSchedule}
status:
  capacity: {cpu: "1000", memory: 4Ti, pods: "$PODS_PER_NODE"}
  allocatable: {cpu: "1000", memory: 4Ti, pods: "$PODS_PER_NODE"}
NODE
}

nodes_ready() {
  local ready
  ready=$(kubectl get nodes -l "$NODE_LABEL" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c True)
  [[ $ready -eq $NODES ]]
}

start() {
  (( NODES >= 1 && NODES <= 240 )) || die "SK_KWOK_NODES must be 1..240 (node N takes 127.(10+N).0.0/16)"
  require_control_plane
  install
  mkdir -p "$STATE"
  if [[ -f $STATE/kwok.pid ]] && kill -0 "$(cat "$STATE/kwok.pid")" 2>/dev/null; then
    log "already running"; return 0
  fi
  write_config
  nohup "$BIN/kwok" --kubeconfig "$KUBECONFIG" --config "$STATE/kwok.yaml" > "$STATE/kwok.log" 2>&1 &
  echo $! > "$STATE/kwok.pid"
  local n
  for (( n = 0; n < NODES; n++ )); do node_manifest "$n"; done | kubectl apply -f - >/dev/null \
    || die "creating the kwok nodes failed"
  if ! wait_until 60 "$NODES kwok nodes" nodes_ready; then
    stop
    die "the kwok nodes did not become Ready; see $STATE/kwok.log"
  fi
  # The apiserver taints a new node not-ready; the node-lifecycle controller that would lift the
  # taint once the node is Ready is off in kube.sh (it would evict pods of nodes with no kubelet).
  kubectl taint nodes -l "$NODE_LABEL" node.kubernetes.io/not-ready:NoSchedule- >/dev/null 2>&1 || true
  log "kwok $KWOK_VERSION manages $NODES nodes labelled $NODE_LABEL, tainted $TAINT_KEY=true:NoSchedule"
}

stop() {
  # Nodes first, while kwok still runs: it removes the pods the deletion leaves behind. Then
  # kube-controller-manager's pod GC force-deletes what is still bound to a missing node.
  if [[ -f $STATE/kwok.pid ]] && require_control_plane_quietly; then
    kubectl delete nodes -l "$NODE_LABEL" --wait=false >/dev/null 2>&1 || log "deleting the kwok nodes failed"
  fi
  stop_pidfile "$STATE/kwok.pid" kwok
}

require_control_plane_quietly() {
  (require_control_plane) >/dev/null 2>&1 || return 1
  local line
  while IFS= read -r line; do export "${line?}"; done < <("$(dirname "$0")/kube.sh" env)
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  env)
    echo "SK_KWOK_NODES=$NODES"
    echo "SK_KWOK_BIN=$BIN"
    echo "SK_KWOK_NODE_SELECTOR=$NODE_LABEL"
    echo "SK_KWOK_TAINT=$TAINT_KEY=true:NoSchedule"
    # Node N's pods get addresses in 127.(10+N).0.0/16.
    echo "SK_KWOK_POD_CIDRS=127.10.0.0/16..127.$((9 + NODES)).0.0/16"
    ;;
  *) die "usage: $0 install|start|stop|env" ;;
esac
