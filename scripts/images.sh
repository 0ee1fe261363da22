#!/usr/bin/env bash
# Builds and publishes the operator and worker images from ./Dockerfile, make-style:
#
#   scripts/images.sh build [target...]   for this machine's platform, loaded into the local engine
#   scripts/images.sh push [target...]    for $PLATFORMS, pushed to $REGISTRY (docker buildx)
#   scripts/images.sh names [target...]   print the image references, one a line
#
# Targets are the Dockerfile's: operator and worker (the default), and velocity-check, the
# example worker build with a processor of its own (examples/custom-processor), only when named:
# it is an example, not a streamkeeper release image.
#
# REGISTRY (default: streamkeeper, i.e. streamkeeper/operator), VERSION (default: the workspace
# version in Cargo.toml), PLATFORMS (default: linux/amd64,linux/arm64) select what is built.
# Needs a Docker engine; `push` needs buildx (multi-arch output cannot be loaded locally).
source "$(dirname "$0")/../tests/services/lib.sh"
cd "$(dirname "$0")/.."

VERSION="${VERSION:-$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)}"
REGISTRY="${REGISTRY:-streamkeeper}"
PLATFORMS="${PLATFORMS:-linux/amd64,linux/arm64}"
REVISION="$(git rev-parse HEAD 2>/dev/null || echo unknown)"
CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
TARGETS=(operator worker)
KNOWN_TARGETS=(operator worker velocity-check)

image() { echo "$REGISTRY/$1:$VERSION"; }

build_args() {
  printf -- '--build-arg\nVERSION=%s\n--build-arg\nREVISION=%s\n--build-arg\nCREATED=%s\n' \
    "$VERSION" "$REVISION" "$CREATED"
}

# The client: SK_DOCKER where tests/services/docker.sh's engine is used (its own docker.io client;
# a newer docker CLI without buildx refuses DOCKER_BUILDKIT=1), else the PATH's.
DOCKER="${SK_DOCKER:-$(type -P docker)}"
docker() { "$DOCKER" "$@"; }

require_engine() {
  [[ -x $DOCKER ]] || die "docker is not installed"
  docker info >/dev/null 2>&1 || die "no Docker engine answers (docker info failed)"
}

build() {
  require_engine
  local args; mapfile -t args < <(build_args)
  for target in "${TARGETS[@]}"; do
    log "building $(image "$target")"
    # --network host: the builder stage fetches Debian packages and crates, and build containers
    # may have no outbound NAT (tests/services/docker.sh runs dockerd without masquerading).
    DOCKER_BUILDKIT=1 docker build --network host "${args[@]}" --target "$target" -t "$(image "$target")" .
  done
}

push() {
  require_engine
  docker buildx version >/dev/null 2>&1 || die "docker buildx is missing: multi-arch images need it"
  local args; mapfile -t args < <(build_args)
  for target in "${TARGETS[@]}"; do
    log "building and pushing $(image "$target") for $PLATFORMS"
    docker buildx build "${args[@]}" --platform "$PLATFORMS" --target "$target" \
      -t "$(image "$target")" --push .
  done
}

usage="usage: $0 build|push|names [${KNOWN_TARGETS[*]}...]"
verb="${1:-}"
shift || true
if (($#)); then
  TARGETS=()
  for target in "$@"; do
    [[ " ${KNOWN_TARGETS[*]} " == *" $target "* ]] || die "unknown target $target; $usage"
    TARGETS+=("$target")
  done
fi
case "$verb" in
  build) build ;;
  push) push ;;
  names) for target in "${TARGETS[@]}"; do image "$target"; done ;;
  *) die "$usage" ;;
esac
