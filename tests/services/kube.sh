#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for tests, in the style of controller-runtime's
# envtest: etcd, kube-apiserver, kube-controller-manager and kube-scheduler (no kubelet: pods get
# their status from the test node agent). Binaries are built from the Go module proxy and cached.
#
#   tests/services/kube.sh install   build (or reuse) the binaries
#   tests/services/kube.sh install-node   also the kubelet and kube-proxy (tests/services/node.sh)
#   tests/services/kube.sh start     install, start, wait until ready, print the kubeconfig path
#   tests/services/kube.sh stop      stop exactly what start started
#   tests/services/kube.sh env       print KUBECONFIG=... and SK_KUBE_BIN=... (one VAR=value a line)
source "$(dirname "$0")/lib.sh"

KUBE_VERSION="${SK_KUBE_VERSION:-v1.34.4}"
BIN="$SK_CACHE/kube/$KUBE_VERSION/bin"
STATE="$SK_RUN/kube"
ETCD_PORT="${SK_ETCD_PORT:-12379}"
ETCD_PEER_PORT="${SK_ETCD_PEER_PORT:-12380}"
API_PORT="${SK_KUBE_API_PORT:-16443}"
KUBECONFIG_FILE="$STATE/kubeconfig"
TOKEN="streamkeeper-test-admin-token"
# SK_KUBE_PROFILE=node is the control plane for a real kubelet (tests/services/node.sh): the
# apiserver advertises the node's pod-network address, which pods reach, and the ServiceAccount
# admission plugin gives pods their tokens. The default profile, for the local node agent, has
# neither: that agent hands out tokens itself, and pods need no service account to exist first.
PROFILE="${SK_KUBE_PROFILE:-default}"
NODE_IP=10.244.0.1

CONTROL_PLANE=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
# The node's own binaries (tests/services/node.sh), from the same module graph: a kubelet and a
# kube-proxy of exactly the control plane's version.
NODE=(kubelet kube-proxy)

has_binaries() {
  local name
  for name in "$@"; do [[ -x $BIN/$name ]] || return 1; done
}

# build <command...>: builds k8s.io/kubernetes/cmd/<command> for each into $BIN, in a wrapper
# module that requires k8s.io/kubernetes at $KUBE_VERSION.
build() {
  go_env
  local wrapper="$SK_CACHE/kube/$KUBE_VERSION/wrapper"
  mkdir -p "$wrapper" "$BIN"
  local gomod
  gomod=$(cd "$wrapper" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [[ -f $gomod ]] || die "could not download k8s.io/kubernetes@$KUBE_VERSION"
  if [[ ! -f $wrapper/go.mod ]]; then
    # k8s.io/kubernetes replaces its staging modules with local paths absent from the module zip;
    # point each one at its published v0.x.y release instead.
    local staging_version="v0.${KUBE_VERSION#v1.}"
    {
      echo "module streamkeeper.dev/kube-wrapper"
      echo
      echo "go 1.24.0"
      echo
      echo "require k8s.io/kubernetes $KUBE_VERSION"
      echo
      grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" \
        | awk -v v="$staging_version" '{print "replace " $1 " => " $1 " " v}'
    } > "$wrapper/go.mod"
  fi
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "go.etcd.io/etcd/server/v3"\n'
    local name
    for name in "${CONTROL_PLANE[@]}" "${NODE[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$name"; done
    printf ')\n'
  } > "$wrapper/tools.go"
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  local packages=()
  for name in "$@"; do packages+=("k8s.io/kubernetes/cmd/$name"); done
  (
    cd "$wrapper"
    go mod tidy -e >/dev/null 2>&1 || true
    go build -trimpath -ldflags "$ldflags" -o "$BIN/" "${packages[@]}"
  ) || die "building $* failed"
}

install() {
  if has_binaries "${CONTROL_PLANE[@]}" etcd; then return 0; fi
  log "building Kubernetes $KUBE_VERSION control plane from the Go module proxy (cold: 15-25 min on 2 cores)"
  build "${CONTROL_PLANE[@]}"
  # etcd comes from the same module graph: k8s.io/kubernetes pins go.etcd.io/etcd/server/v3.
  (cd "$SK_CACHE/kube/$KUBE_VERSION/wrapper" && go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3) \
    || die "building etcd failed"
  log "built: $(ls "$BIN" | tr '\n' ' ')"
}

install_node() {
  install
  if has_binaries "${NODE[@]}"; then return 0; fi
  log "building the kubelet and kube-proxy $KUBE_VERSION (cold, after the control plane: ~3 min)"
  build "${NODE[@]}"
}

write_certs() {
  mkdir -p "$STATE/certs"
  local c="$STATE/certs"
  [[ -f $c/sa.key ]] || openssl genrsa -out "$c/sa.key" 2048 2>/dev/null
  openssl rsa -in "$c/sa.key" -pubout -out "$c/sa.pub" 2>/dev/null
  [[ -f $c/ca.key ]] || openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=streamkeeper-test-ca" \
      -keyout "$c/ca.key" -out "$c/ca.crt" 2>/dev/null
  # A certificate from before the node's address was among its names is made again.
  grep -q "IP:$NODE_IP" "$c/ext.cnf" 2>/dev/null || rm -f "$c/apiserver.crt"
  if [[ ! -f $c/apiserver.crt ]]; then
    openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" -keyout "$c/apiserver.key" \
      -out "$c/apiserver.csr" 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:%s,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' "$NODE_IP" > "$c/ext.cnf"
    openssl x509 -req -in "$c/apiserver.csr" -CA "$c/ca.crt" -CAkey "$c/ca.key" -CAcreateserial \
      -days 3650 -extfile "$c/ext.cnf" -out "$c/apiserver.crt" 2>/dev/null
  fi
  echo "$TOKEN,admin,admin-uid,system:masters" > "$c/tokens.csv"
}

write_kubeconfig() {
  cat > "$KUBECONFIG_FILE" <<KC
apiVersion: v1
kind: Config
clusters:
- name: streamkeeper-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority: $STATE/certs/ca.crt
users:
- name: admin
  user:
    token: $TOKEN
contexts:
- name: streamkeeper-test
  context: {cluster: streamkeeper-test, user: admin, namespace: default}
current-context: streamkeeper-test
KC
}

launch() { # launch <name> <binary> <args...>
  local name=$1; shift
  nohup "$@" > "$STATE/$name.log" 2>&1 &
  echo $! > "$STATE/$name.pid"
}

start() {
  install
  if [[ -f $STATE/kube-apiserver.pid ]] && kill -0 "$(cat "$STATE/kube-apiserver.pid")" 2>/dev/null; then
    log "already running"; echo "$KUBECONFIG_FILE"; return 0
  fi
  rm -rf "$STATE/etcd-data"
  mkdir -p "$STATE"
  require_free_port "$ETCD_PORT"; require_free_port "$API_PORT"
  write_certs
  write_kubeconfig
  launch etcd "$BIN/etcd" --name streamkeeper-test --data-dir "$STATE/etcd-data" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "streamkeeper-test=http://127.0.0.1:$ETCD_PEER_PORT" --unsafe-no-fsync \
    --listen-metrics-urls "" --log-level warn
  wait_until 60 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health" \
    || die "etcd did not become healthy; see $STATE/etcd.log"
  local c="$STATE/certs"
  local profile_flags=(--advertise-address 127.0.0.1 --disable-admission-plugins ServiceAccount)
  # The kubelet's node has no resolvable host name: `kubectl logs` and `exec` go to its address.
  [[ $PROFILE == node ]] && profile_flags=(--advertise-address "$NODE_IP"
    --kubelet-preferred-address-types InternalIP)
  launch kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --cert-dir "$c" --tls-cert-file "$c/apiserver.crt" --tls-private-key-file "$c/apiserver.key" \
    --secure-port "$API_PORT" --bind-address 127.0.0.1 "${profile_flags[@]}" \
    --service-cluster-ip-range 10.0.0.0/24 --allow-privileged=true --authorization-mode RBAC \
    --token-auth-file "$c/tokens.csv" --client-ca-file "$c/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc --service-account-key-file "$c/sa.pub" \
    --service-account-signing-key-file "$c/sa.key" \
    --enable-priority-and-fairness=false --storage-media-type application/json --v 0
  wait_until 120 kube-apiserver curl -sfk -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$API_PORT/readyz" \
    || die "kube-apiserver did not become ready; see $STATE/kube-apiserver.log"
  launch kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$KUBECONFIG_FILE" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
    --service-account-private-key-file "$c/sa.key" --root-ca-file "$c/ca.crt" \
    --use-service-account-credentials=false --controllers '*,-node-lifecycle-controller' \
    --cluster-signing-cert-file "$c/ca.crt" --cluster-signing-key-file "$c/ca.key"
  launch kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$KUBECONFIG_FILE" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 0
  wait_until 60 "default service account" "$BIN/kubectl" --kubeconfig "$KUBECONFIG_FILE" get serviceaccount default \
    || die "kube-controller-manager did not create the default service account; see $STATE/kube-controller-manager.log"
  log "control plane $KUBE_VERSION at https://127.0.0.1:$API_PORT (profile $PROFILE)"
  echo "$KUBECONFIG_FILE"
}

stop() {
  for name in kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_pidfile "$STATE/$name.pid" "$name"
  done
}

case "${1:-}" in
  install) install ;;
  install-node) install_node ;;
  start) start ;;
  stop) stop ;;
  env) echo "KUBECONFIG=$KUBECONFIG_FILE"; echo "SK_KUBE_BIN=$BIN" ;;
  *) die "usage: $0 install|install-node|start|stop|env" ;;
esac
