#!/usr/bin/env bash
# A real Kubernetes node on this machine for the end-to-end tests: containerd (its CRI plugin)
# and runc run the pods' containers, a kubelet of the control plane's own version registers with
# the test apiserver, kube-proxy gives Services their ClusterIPs, CoreDNS answers cluster names,
# and a local-volume provisioner binds PVCs. Needs root and the control plane of
# tests/services/kube.sh started with SK_KUBE_PROFILE=node (see "The network" below).
#
#   tests/services/node.sh install           Debian packages, kubelet, kube-proxy, CoreDNS, crictl,
#                                            the pause image (all cached, keyed by version)
#   tests/services/node.sh start             start everything, wait until the node is Ready
#   tests/services/node.sh load <archive...> import OCI image archives into the node's containerd
#   tests/services/node.sh stop              remove every pod sandbox, stop exactly what start started
#   tests/services/node.sh env               SK_NODE_NAME=..., SK_NODE_IP=..., SK_CRICTL=... lines
#
# The network: a bridge of its own ($BRIDGE, $NODE_IP/24) is the pod network and the node's
# address; pods get addresses from it through the CNI bridge and host-local plugins, and nothing
# is routed from it to any other interface. The kubelet, CoreDNS and a forwarder to the
# apiserver listen on $NODE_IP; everything else stays on loopback. The apiserver advertises
# $NODE_IP (the node profile), so the `kubernetes` Service's ClusterIP reaches it through
# kube-proxy and the forwarder, and pods use their ServiceAccount tokens as in any cluster.
source "$(dirname "$0")/lib.sh"
ROOT_DIR="$(cd "$(dirname "$0")/../.." && pwd)"

KUBE_VERSION="${SK_KUBE_VERSION:-v1.34.4}"
KUBE_BIN="$SK_CACHE/kube/$KUBE_VERSION/bin"
COREDNS_VERSION=v1.14.7
CRICTL_VERSION=v1.34.0
COREDNS="$SK_CACHE/node/coredns-$COREDNS_VERSION/bin/coredns"
CRICTL="$SK_CACHE/node/crictl-$CRICTL_VERSION/bin/crictl"
PAUSE_IMAGE=streamkeeper.test/pause:1
PAUSE_ARCHIVE="$SK_CACHE/node/pause-$(cat "$ROOT_DIR"/tests/services/node/{pause.go,pause_image.py} | sha256sum | cut -c1-12).tar"
PACKAGES=(containerd runc containernetworking-plugins iptables conntrack socat)
CNI_BIN=/usr/lib/cni

STATE="$SK_RUN/node"
NODE_NAME="${SK_NODE_NAME:-sk-node-0}"
NODE_ZONE="${SK_NODE_ZONE:-zone-a}"
BRIDGE=sk-cni0
NODE_IP=10.244.0.1
POD_CIDR=10.244.0.0/24
API_PORT="${SK_KUBE_API_PORT:-16443}"
SOCKET="$STATE/containerd/containerd.sock"
KUBECONFIG_FILE="$SK_RUN/kube/kubeconfig"
CHAIN=SK-NODE-FORWARD

kubectl() { "$KUBE_BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" "$@"; }
crictl() { "$CRICTL" --config "$STATE/crictl.yaml" "$@"; }

go_install() { # go_install <binary path> <package@version>
  [[ -x $1 ]] && return 0
  go_env
  log "building $2 from the Go module proxy"
  GOBIN="$(dirname "$1")" go install -trimpath -ldflags "-s -w" "$2" || die "building $2 failed"
}

install() {
  install_debian_packages "${PACKAGES[@]}"
  "$(dirname "$0")/kube.sh" install-node
  go_install "$COREDNS" "github.com/coredns/coredns@$COREDNS_VERSION"
  go_install "$CRICTL" "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION"
  if [[ ! -f $PAUSE_ARCHIVE ]]; then
    go_env
    local build="$SK_CACHE/node/pause-build"
    mkdir -p "$build"
    (cd "$ROOT_DIR/tests/services/node" && go build -trimpath -ldflags "-s -w" -o "$build/pause" .) \
      || die "building the pause binary failed"
    python3 "$ROOT_DIR/tests/services/node/pause_image.py" "$build/pause" "$PAUSE_IMAGE" "$PAUSE_ARCHIVE.tmp" \
      && mv "$PAUSE_ARCHIVE.tmp" "$PAUSE_ARCHIVE" || die "writing the pause image failed"
  fi
}

local_node_binary() {
  local binary="${SK_LOCAL_NODE_BIN:-${CARGO_TARGET_DIR:-$SK_CACHE/cargo-target}/debug/streamkeeper-local-node}"
  [[ -x $binary ]] || die "no $binary: build the workspace first (cargo build --workspace --all-targets --locked)"
  echo "$binary"
}

launch() { # launch <name> <command...>
  local name=$1; shift
  nohup "$@" > "$STATE/$name.log" 2>&1 &
  echo $! > "$STATE/$name.pid"
}

running() { [[ -f $STATE/$1.pid ]] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

# The pod network: a bridge with the node's address, and no forwarding off it.
network_up() {
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge || die "cannot create the bridge $BRIDGE"
  fi
  ip addr replace "$NODE_IP/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  cat /proc/sys/net/ipv4/ip_forward > "$STATE/ip_forward.before"
  # Forwarding carries pod -> ClusterIP -> pod after kube-proxy's DNAT; the chain below keeps it
  # inside the pod network.
  sysctl -qw net.ipv4.ip_forward=1
  iptables -N "$CHAIN" 2>/dev/null || iptables -F "$CHAIN"
  iptables -A "$CHAIN" -i "$BRIDGE" -o "$BRIDGE" -j ACCEPT
  iptables -A "$CHAIN" -i "$BRIDGE" -j DROP
  iptables -A "$CHAIN" -o "$BRIDGE" -j DROP
  iptables -C FORWARD -j "$CHAIN" 2>/dev/null || iptables -I FORWARD 1 -j "$CHAIN"
}

# The kubelet's and kube-proxy's iptables chains (KUBE-*): nothing else on a test machine has them.
remove_kube_chains() {
  local table rule chain
  for table in filter nat mangle; do
    while IFS= read -r rule; do
      eval "iptables -t $table ${rule/#-A/-D}" 2>/dev/null || true
    done < <(iptables-save -t "$table" 2>/dev/null | grep -E '^-A [A-Z]+ .*-j KUBE-' | grep -Ev '^-A KUBE-')
    mapfile -t chains < <(iptables-save -t "$table" 2>/dev/null | sed -n 's/^:\(KUBE-[A-Z0-9-]*\) .*/\1/p')
    for chain in "${chains[@]}"; do iptables -t "$table" -F "$chain" 2>/dev/null || true; done
    for chain in "${chains[@]}"; do iptables -t "$table" -X "$chain" 2>/dev/null || true; done
  done
}

network_down() {
  remove_kube_chains
  iptables -D FORWARD -j "$CHAIN" 2>/dev/null || true
  iptables -F "$CHAIN" 2>/dev/null || true
  iptables -X "$CHAIN" 2>/dev/null || true
  if [[ -f $STATE/ip_forward.before ]]; then
    sysctl -qw "net.ipv4.ip_forward=$(cat "$STATE/ip_forward.before")"
    rm -f "$STATE/ip_forward.before"
  fi
  ip link del "$BRIDGE" 2>/dev/null || true
}

write_containerd_config() {
  mkdir -p "$STATE/containerd" "$STATE/cni/net.d"
  cat > "$STATE/containerd/config.toml" <<TOML
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$SOCKET"
[ttrpc]
  address = "$SOCKET.ttrpc"
[debug]
  address = "$STATE/containerd/debug.sock"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  # This VM refuses negative oom_score_adj writes (EIO); without this, sandboxes fail in runc
  # with "can't get final child's PID from pipe".
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$STATE/cni/net.d"
TOML
  cat > "$STATE/cni/net.d/10-streamkeeper.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "streamkeeper-pods",
  "plugins": [{
    "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": "$STATE/cni/ipam",
      "ranges": [[{"subnet": "$POD_CIDR", "rangeStart": "10.244.0.10", "gateway": "$NODE_IP"}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
JSON
}

write_kubelet_config() {
  mkdir -p "$STATE/kubelet"
  # Pods with dnsPolicy Default inherit this; there is no upstream resolver to offer them.
  printf 'nameserver %s\n' "$NODE_IP" > "$STATE/resolv.conf"
  cat > "$STATE/kubelet/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
# The apiserver's proxy to the kubelet (kubectl logs, exec) is the only client: anonymous, allowed.
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://$SOCKET
cgroupDriver: cgroupfs
failSwapOn: false
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
resolvConf: $STATE/resolv.conf
podCIDR: $POD_CIDR
maxPods: 60
# A shared test machine's disk is often below the default thresholds (15% free image fs).
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerNode: true
rotateCertificates: false
serverTLSBootstrap: false
YAML
}

control_plane_for_node() {
  kubectl get --raw /readyz >/dev/null 2>&1 \
    || die "the control plane does not answer; start it first: SK_KUBE_PROFILE=node tests/services/kube.sh start"
  local advertised
  advertised=$(kubectl get endpointslice -n default -l kubernetes.io/service-name=kubernetes \
    -o jsonpath='{.items[*].endpoints[*].addresses[*]}')
  [[ $advertised == "$NODE_IP" ]] || die "the apiserver advertises '$advertised', not $NODE_IP, so pods cannot reach it; restart it with SK_KUBE_PROFILE=node tests/services/kube.sh start"
}

node_ready() {
  [[ $(kubectl get node "$NODE_NAME" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null) == True ]]
}

start() {
  [[ $(id -u) -eq 0 ]] || die "the node needs root (containerd, runc, the bridge, iptables)"
  install
  if running kubelet; then log "already running"; return 0; fi
  control_plane_for_node
  # A new node: the volumes and address leases of an earlier one belong to a cluster that is gone.
  rm -rf "$STATE/provisioner" "$STATE/cni/ipam"
  mkdir -p "$STATE"
  local provisioner
  provisioner=$(local_node_binary)
  network_up
  # The apiserver binds loopback only: the forwarder gives pods its advertised address.
  launch apiserver-forwarder socat "TCP-LISTEN:$API_PORT,bind=$NODE_IP,fork,reuseaddr" "TCP:127.0.0.1:$API_PORT"
  write_containerd_config
  printf 'runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\n' "$SOCKET" "$SOCKET" > "$STATE/crictl.yaml"
  launch containerd containerd --config "$STATE/containerd/config.toml"
  wait_until 60 containerd crictl info || die "containerd did not come up; see $STATE/containerd.log"
  load "$PAUSE_ARCHIVE"
  # Two server blocks, not one: CoreDNS runs its plugins in its compiled order, where template
  # comes before kubernetes and would answer NXDOMAIN for the cluster's names too.
  cat > "$STATE/Corefile" <<COREFILE
cluster.local:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $KUBECONFIG_FILE streamkeeper-test
        pods insecure
    }
}
# Nothing outside the cluster resolves here.
.:53 {
    bind $NODE_IP
    template ANY ANY {
        rcode NXDOMAIN
    }
}
COREFILE
  launch coredns "$COREDNS" -conf "$STATE/Corefile"
  write_kubelet_config
  launch kubelet "$KUBE_BIN/kubelet" --config "$STATE/kubelet/config.yaml" \
    --kubeconfig "$KUBECONFIG_FILE" --root-dir "$STATE/kubelet/root" --cert-dir "$STATE/kubelet/pki" \
    --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
    --node-labels "topology.kubernetes.io/zone=$NODE_ZONE" --v 1
  wait_until 120 "node $NODE_NAME Ready" node_ready || die "the kubelet's node did not become Ready; see $STATE/kubelet.log"
  # No node-lifecycle controller runs (tests/services/kube.sh) to lift the kubelet's own taint.
  kubectl taint node "$NODE_NAME" node.kubernetes.io/not-ready- >/dev/null 2>&1 || true
  launch kube-proxy "$KUBE_BIN/kube-proxy" --kubeconfig "$KUBECONFIG_FILE" --hostname-override "$NODE_NAME" \
    --proxy-mode iptables --cluster-cidr "$POD_CIDR" --bind-address 127.0.0.1 \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249 \
    --nodeport-addresses "$NODE_IP/32" --conntrack-max-per-core 0
  wait_until 60 kube-proxy curl -sf http://127.0.0.1:10256/healthz || die "kube-proxy is not healthy; see $STATE/kube-proxy.log"
  KUBECONFIG="$KUBECONFIG_FILE" launch provisioner "$provisioner" --root "$STATE/provisioner" \
    --provision-only-for "$NODE_NAME"
  log "node $NODE_NAME Ready at $NODE_IP (zone $NODE_ZONE); pods in $POD_CIDR"
}

load() {
  local archive
  for archive in "$@"; do
    [[ -f $archive ]] || die "no image archive $archive"
    ctr --address "$SOCKET" -n k8s.io images import --no-unpack=false "$archive" >/dev/null \
      || die "importing $archive into the node's containerd failed"
    log "loaded $(basename "$archive")"
  done
}

stop() {
  stop_pidfile "$STATE/provisioner.pid" provisioner
  stop_pidfile "$STATE/kube-proxy.pid" kube-proxy
  [[ -x $KUBE_BIN/kube-proxy ]] && "$KUBE_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || true
  stop_pidfile "$STATE/kubelet.pid" kubelet
  # The kubelet leaves its pods running under containerd's shims: remove every sandbox through
  # the CRI, so their containers stop and CNI releases their addresses and veths.
  if [[ -S $SOCKET ]] && running containerd; then
    crictl stopp $(crictl pods -q) >/dev/null 2>&1 || true
    crictl rmp -f $(crictl pods -q) >/dev/null 2>&1 || true
  fi
  stop_pidfile "$STATE/containerd.pid" containerd
  # A shim outlives containerd; these are the ones of this node's socket.
  pkill -KILL -f "containerd-shim-runc-v2 .*-address $SOCKET" 2>/dev/null || true
  stop_pidfile "$STATE/coredns.pid" coredns
  stop_pidfile "$STATE/apiserver-forwarder.pid" apiserver-forwarder
  for mount in $(awk -v root="$STATE/" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r); do
    umount -l "$mount" 2>/dev/null || true
  done
  network_down
  kubectl delete node "$NODE_NAME" --ignore-not-found --wait=false >/dev/null 2>&1 || true
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  load) shift; load "$@" ;;
  stop) stop ;;
  env) echo "SK_NODE_NAME=$NODE_NAME"; echo "SK_NODE_IP=$NODE_IP"; echo "SK_CRICTL=$CRICTL --config $STATE/crictl.yaml"
       echo "SK_NODE_CONTAINERD=$SOCKET" ;;
  *) die "usage: $0 install|start|load <archive...>|stop|env" ;;
esac
