#!/usr/bin/env bash
# Helm, built from the Go module proxy and cached by version (the chart tests lint, template and
# install charts/streamkeeper with it). Helm is a client only: nothing to start or stop.
#
#   tests/services/helm.sh install   build (or reuse) the helm binary
#   tests/services/helm.sh env       print SK_HELM=... (one VAR=value a line)
source "$(dirname "$0")/lib.sh"

HELM_VERSION="${SK_HELM_VERSION:-v3.22.0}"
BIN="$SK_CACHE/helm/$HELM_VERSION/bin"

install() {
  if [[ -x $BIN/helm ]]; then
    return 0
  fi
  go_env
  mkdir -p "$BIN"
  log "building helm $HELM_VERSION from the Go module proxy (cold: a few minutes on 2 cores)"
  # `go install pkg@version` builds in module mode from the module's own go.mod and refuses
  # -mod=mod, which go_env sets for the control plane's wrapper module.
  # helm prints internal/version.version; without -X it would report its source default.
  GOFLAGS= GOBIN="$BIN" go install -trimpath \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
    "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" || die "building helm $HELM_VERSION failed"
  "$BIN/helm" version --short >&2 || die "the built helm does not run"
}

case "${1:-}" in
  install) install ;;
  # No service runs; start and stop exist so tests/run.sh can treat helm like the others.
  start) install ;;
  stop) ;;
  env) echo "SK_HELM=$BIN/helm" ;;
  *) die "usage: $0 install|start|stop|env" ;;
esac
