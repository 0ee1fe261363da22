#!/usr/bin/env bash
# A kind node image for the control plane's Kubernetes version, built without any registry: for
# this machine, where registry.k8s.io and docker.io do not answer, and for air-gapped kind users.
# `kind build node-image` cannot do it: it pulls its base image and every image it preloads.
#
#   tests/e2e/kind-node-image.sh build      build (or find, cached) the image in the local Docker
#                                           engine; prints its reference
#   tests/e2e/kind-node-image.sh binaries   only build (or find, cached) the binaries (no engine)
#   tests/e2e/kind-node-image.sh name       prints the reference the build makes
#
# What it builds on (docs/development.md, "kind without a registry"):
# - kubelet, kubectl and the control-plane binaries of tests/services/kube.sh (built from the Go
#   module proxy, shared with the real node), and kubeadm from the same module graph;
# - from the Go module proxy as well: containerd, crictl and the CNI plugins (the versions kind
#   v0.33.0's base image uses, or the nearest the proxy serves), etcd at the version kubeadm
#   names, CoreDNS, flannel (the node's default CNI, tests/e2e/kind-node/default-cni.yaml) and
#   local-path-provisioner (its default StorageClass, default-storage.yaml); pause from the C
#   source in k8s.io/kubernetes, with this machine's gcc;
# - kind's base-image files (entrypoint, units, containerd config) from the sigs.k8s.io/kind
#   module, at the version of the kind binary this script builds;
# - Debian's packages on a debian:bookworm-slim stand-in (tests/e2e/base-images.sh);
# - `docker build` of tests/e2e/kind-node/images.Dockerfile (one image per binary, tagged as
#   `kubeadm config images list` says) and tests/e2e/kind-node/Dockerfile (the node).
#
# Everything is cached under $SK_CACHE/kind-node/<version>, keyed by version; the image carries a
# label with the hash of its recipe (this script, tests/e2e/kind-node and the versions) and is
# rebuilt when that changes. Measured on 2 shared cores, Go builds under `nice -n 19` (they always
# are): the binaries ~7 min after tests/services/kube.sh install-node (plus ~15-25 min for that from
# nothing), the image builds ~2 min; warm, seconds. Needs a Docker engine (tests/services/docker.sh
# start) and root for the Debian stand-in.
#
# SK_KUBE_VERSION picks the Kubernetes version (default v1.34.4, the control plane's); versions of
# the other parts are in the table below.
# shellcheck source-path=SCRIPTDIR source-path=SCRIPTDIR/../..
source "$(dirname "$0")/../services/lib.sh"
cd "$(dirname "$0")/../.." || exit 1

KUBE_VERSION="${SK_KUBE_VERSION:-v1.34.4}"
KIND_VERSION="${SK_KIND_VERSION:-v0.33.0}"
DEBIAN_RELEASE=bookworm
NODE_CACHE="$SK_CACHE/kind-node/$KUBE_VERSION"
IMAGE_REPO=streamkeeper.test/kind-node
LABEL=dev.streamkeeper.kind-node.recipe

# What is built from the Go module proxy, one component a line:
#   name  module  version  packages (relative to the module; "." its root)  [go build flags...]
# containerd, crictl and the CNI plugins follow kind v0.33.0's base image (crictl v1.34.0 matches
# the kubelet; the proxy has no v1.36). etcd is the version kubeadm names (checked at build time).
# flanneld needs cgo on amd64 (its UDP backend is C), as flannel's own Makefile builds it; it runs
# on Debian, whose glibc it links.
# CoreDNS: kubeadm v1.34 names v1.12.1, which the proxy does not serve; v1.14.7 is tagged as
# kubeadm expects (its image says the real version in a label). The flannel CNI plugin is
# containernetworking/plugins v0.9.1's (flannel-io/cni-plugin is not on the proxy).
COMPONENTS=(
  "containerd github.com/containerd/containerd/v2 v2.3.4 cmd/containerd,cmd/ctr,cmd/containerd-shim-runc-v2 -tags=no_btrfs,no_devmapper,no_zfs -ldflags=-s~-w~-X~github.com/containerd/containerd/v2/version.Version=v2.3.4"
  "crictl sigs.k8s.io/cri-tools v1.34.0 cmd/crictl -ldflags=-s~-w~-X~sigs.k8s.io/cri-tools/pkg/version.Version=v1.34.0"
  "cni-plugins github.com/containernetworking/plugins v1.9.1 plugins/ipam/host-local,plugins/main/loopback,plugins/main/ptp,plugins/main/bridge,plugins/meta/portmap -ldflags=-s~-w~-X~github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v1.9.1"
  "cni-flannel github.com/containernetworking/plugins v0.9.1 plugins/meta/flannel -ldflags=-s~-w"
  "etcd go.etcd.io/etcd/server/v3 v3.6.5 . -ldflags=-s~-w"
  "coredns github.com/coredns/coredns v1.14.7 . -ldflags=-s~-w"
  "flannel github.com/flannel-io/flannel v0.28.10 cmd/install_conf CGO_ENABLED=1 -ldflags=-s~-w~-X~github.com/flannel-io/flannel/pkg/version.Version=v0.28.10"
  "local-path-provisioner github.com/rancher/local-path-provisioner v0.0.30 . -ldflags=-s~-w~-X~main.VERSION=v0.0.30"
)
PAUSE_VERSION=3.10.1

component() { # component <name>: its line
  local line
  for line in "${COMPONENTS[@]}"; do [[ ${line%% *} == "$1" ]] && { echo "$line"; return 0; }; done
  die "no component $1"
}
version_of() { local _ _m v; read -r _ _m v _ <<< "$(component "$1")"; echo "$v"; }
# Keyed by the component's whole line, so a change of flags builds it again.
component_dir() { echo "$NODE_CACHE/components/$1-$(version_of "$1")-$(component "$1" | sha256sum | cut -c1-8)"; }

# build_component <name>: go build of its packages in a wrapper module that requires the module
# at its version (the way tests/services/kube.sh builds Kubernetes: a module's own replace
# directives point at folders the module zip lacks). Output: component_dir/bin.
build_component() {
  local name module version packages flags
  read -r name module version packages flags <<< "$(component "$1")"
  local dir out
  dir=$(component_dir "$name"); out="$dir/bin"
  [[ -f $out/.done ]] && return 0
  go_env
  local start=$SECONDS
  log "building $name $version ($module) from the Go module proxy"
  rm -rf "$dir"; mkdir -p "$dir/wrapper" "$out"
  local imports=() pkg
  IFS=, read -r -a packages <<< "$packages"
  for pkg in "${packages[@]}"; do
    if [[ $pkg == . ]]; then imports+=("$module"); else imports+=("$module/$pkg"); fi
  done
  printf 'module streamkeeper.dev/kind-node-%s\n\ngo 1.24.0\n\nrequire %s %s\n' "$name" "$module" "$version" \
    > "$dir/wrapper/go.mod"
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "%s"\n' "${imports[@]}"
    printf ')\n'
  } > "$dir/wrapper/tools.go"
  local main_packages=("${imports[@]}")
  if [[ $name == flannel ]]; then
    # flanneld is flannel's main.go, built here without its Tencent Cloud VPC backend: that
    # backend's SDK module (github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc) is not
    # on the module proxy. Every other backend (host-gw, vxlan, ...) is kept.
    local source
    source=$(go mod download -json "$module@$version" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/main.go
    [[ -f $source ]] || die "flannel $version has no main.go"
    mkdir -p "$dir/wrapper/flanneld"
    grep -v '"github.com/flannel-io/flannel/pkg/backend/tencentvpc"' "$source" > "$dir/wrapper/flanneld/main.go"
    main_packages+=(./flanneld)
  fi
  # Flags are written with ~ for spaces in the table; NAME=value sets the environment.
  local build_flags=() build_env=() flag
  for flag in $flags; do
    if [[ $flag == [A-Z]*=* ]]; then build_env+=("$flag"); else build_flags+=("${flag//\~/ }"); fi
  done
  (
    cd "$dir/wrapper" || exit 1
    nice -n 19 go mod tidy > "$dir/build.log" 2>&1 || exit 1
    for pkg in "${main_packages[@]}"; do
      local binary=${pkg##*/}
      # A module root is named for the component (go.etcd.io/etcd/server/v3 would be "v3").
      [[ $pkg == "$module" ]] && binary=$name
      [[ $name == cni-flannel ]] && binary=flannel
      env "${build_env[@]}" nice -n 19 go build -trimpath "${build_flags[@]}" -o "$out/$binary" "$pkg" >> "$dir/build.log" 2>&1 || exit 1
    done
  ) || die "building $name $version failed; end of $dir/build.log: $(tail -n 20 "$dir/build.log")"
  touch "$out/.done"
  log "$name $version built in $(( SECONDS - start )) s: $(cd "$out" && echo *)"
}

# kubeadm, from a copy of tests/services/kube.sh's wrapper module (the same module graph, so the
# Go build cache it filled is reused), with the same version stamp.
build_kubeadm() {
  local out="$NODE_CACHE/kubeadm"
  [[ -x $out/kubeadm ]] && return 0
  local kube_wrapper="$SK_CACHE/kube/$KUBE_VERSION/wrapper" wrapper="$NODE_CACHE/kubeadm-wrapper"
  [[ -f $kube_wrapper/go.mod ]] || die "$kube_wrapper/go.mod is missing: run tests/services/kube.sh install first"
  go_env
  local start=$SECONDS minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  log "building kubeadm $KUBE_VERSION"
  mkdir -p "$wrapper" "$out"
  sed 's#^module .*#module streamkeeper.dev/kind-node-kubeadm#' "$kube_wrapper/go.mod" > "$wrapper/go.mod"
  cp "$kube_wrapper/go.sum" "$wrapper/go.sum"
  printf '//go:build tools\n\npackage tools\n\nimport _ "k8s.io/kubernetes/cmd/kubeadm"\n' > "$wrapper/tools.go"
  local ldflags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  (cd "$wrapper" && nice -n 19 go build -trimpath -ldflags "$ldflags" -o "$out/kubeadm.tmp" k8s.io/kubernetes/cmd/kubeadm) \
    || die "building kubeadm failed"
  mv "$out/kubeadm.tmp" "$out/kubeadm"
  log "kubeadm built in $(( SECONDS - start )) s"
}

# build_pause: kubernetes' own pause.c (build/pause/linux), static, as its Makefile does.
build_pause() {
  local out="$NODE_CACHE/pause-$PAUSE_VERSION"
  [[ -x $out/pause ]] && return 0
  install_debian_packages gcc libc6-dev
  go_env
  local source
  source=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')/build/pause/linux/pause.c
  [[ -f $source ]] || die "pause.c is missing from k8s.io/kubernetes@$KUBE_VERSION ($source)"
  mkdir -p "$out"
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-streamkeeper" -o "$out/pause.tmp" "$source" \
    || die "compiling pause failed"
  strip "$out/pause.tmp" && mv "$out/pause.tmp" "$out/pause"
}

# kind_files: kind's images/base/files, from the sigs.k8s.io/kind module at KIND_VERSION.
kind_files() {
  go_env
  local dir
  dir=$(go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  [[ -d $dir/images/base/files ]] || die "sigs.k8s.io/kind@$KIND_VERSION has no images/base/files"
  echo "$dir/images/base/files"
}

# The images kubeadm names for this version, one a line (registry.k8s.io/kube-apiserver:v1.34.4 ...).
kubeadm_images() {
  "$NODE_CACHE/kubeadm/kubeadm" config images list --kubernetes-version "$KUBE_VERSION" 2>/dev/null \
    || die "kubeadm config images list failed"
}

# recipe: a hash of everything the image is made from but the binaries' contents, which the
# versions pin.
recipe() {
  {
    cat "$0" tests/e2e/kind-node/Dockerfile tests/e2e/kind-node/images.Dockerfile \
      tests/e2e/kind-node/default-cni.yaml tests/e2e/kind-node/default-storage.yaml
    echo "$KUBE_VERSION $KIND_VERSION $DEBIAN_RELEASE"
    docker image inspect --format '{{.Id}}' "debian:$DEBIAN_RELEASE-slim" 2>/dev/null
  } | sha256sum | cut -c1-12
}

image_name() { echo "$IMAGE_REPO:$KUBE_VERSION"; }

# The engine: the caller's DOCKER_HOST, else the one tests/services/docker.sh runs; with that one,
# its own client (a newer docker CLI without buildx refuses DOCKER_BUILDKIT=1).
use_our_client() {
  local ours line
  ours=$(tests/services/docker.sh env | sed -n 's/^DOCKER_HOST=//p')
  if [[ -z ${DOCKER_HOST:-} || $DOCKER_HOST == "$ours" ]]; then
    while IFS= read -r line; do export "${line?}"; done < <(tests/services/docker.sh env)
  fi
}
use_engine() {
  use_our_client
  DOCKER="${SK_DOCKER:-$(type -P docker)}"
  [[ -x $DOCKER ]] || die "docker is not installed"
  docker info >/dev/null 2>&1 || die "no Docker engine answers at $DOCKER_HOST (start one: tests/services/docker.sh start)"
}
docker() { "$DOCKER" "$@"; }

# link_or_copy <file> <dest>: a hard link where possible (the binaries are large).
link_or_copy() { ln -f "$1" "$2" 2>/dev/null || cp -f "$1" "$2"; }

# stage_images <context>: the component images, built and saved as archives into <context>/images.
stage_images() {
  local context=$1 build="$NODE_CACHE/images-context" kube_bin
  kube_bin=$(tests/services/kube.sh env | sed -n 's/^SK_KUBE_BIN=//p')
  rm -rf "$build"; mkdir -p "$build/bin" "$context/images"
  local name
  for name in kube-apiserver kube-controller-manager kube-scheduler kube-proxy; do
    link_or_copy "$kube_bin/$name" "$build/bin/$name"
  done
  link_or_copy "$(component_dir etcd)/bin/etcd" "$build/bin/etcd"
  link_or_copy "$(component_dir coredns)/bin/coredns" "$build/bin/coredns"
  link_or_copy "$NODE_CACHE/pause-$PAUSE_VERSION/pause" "$build/bin/pause"
  link_or_copy "$(component_dir flannel)/bin/flanneld" "$build/bin/flanneld"
  link_or_copy "$(component_dir flannel)/bin/install_conf" "$build/bin/install-conf"
  link_or_copy "$(component_dir cni-flannel)/bin/flannel" "$build/bin/flannel"
  link_or_copy "$(component_dir local-path-provisioner)/bin/local-path-provisioner" "$build/bin/local-path-provisioner"
  cp tests/e2e/kind-node/images.Dockerfile "$build/Dockerfile"

  # target reference, for every image: kubeadm's list, then the node manifests' own.
  local rows=() ref target
  while IFS= read -r ref; do
    target=${ref##*/}; target=${target%%:*}
    rows+=("$target $ref")
  done < <(kubeadm_images)
  local etcd_tag
  etcd_tag=$(kubeadm_images | sed -n 's#.*/etcd:##p')
  [[ ${etcd_tag%-*} == "$(version_of etcd | tr -d v)" ]] \
    || die "kubeadm $KUBE_VERSION names etcd $etcd_tag, the table builds $(version_of etcd): update COMPONENTS"
  rows+=("flannel streamkeeper.test/flannel:$(version_of flannel)"
    "flannel-cni-plugin streamkeeper.test/flannel-cni-plugin:$(version_of cni-flannel)"
    "local-path-provisioner streamkeeper.test/local-path-provisioner:$(version_of local-path-provisioner)"
    "local-path-helper streamkeeper.test/local-path-helper:$DEBIAN_RELEASE")
  local row refs=()
  for row in "${rows[@]}"; do
    read -r target ref <<< "$row"
    local labels=(--label "org.opencontainers.image.description=built by tests/e2e/kind-node-image.sh for a kind node without a registry")
    [[ $target == coredns ]] && labels+=(--label "org.opencontainers.image.version=$(version_of coredns)")
    DOCKER_BUILDKIT=1 docker build -q --network host --target "$target" "${labels[@]}" \
      --build-arg "DEBIAN_RELEASE=$DEBIAN_RELEASE" -t "$ref" "$build" >/dev/null \
      || die "docker build of $ref (target $target) failed"
    refs+=("$ref")
  done
  # One archive an image: ctr imports each with its name.
  for ref in "${refs[@]}"; do
    docker save -o "$context/images/$(echo "$ref" | tr '/:' '__').tar" "$ref" || die "docker save $ref failed"
  done
  SANDBOX_IMAGE=$(kubeadm_images | grep '/pause:')
}

binaries() {
  local start=$SECONDS
  tests/services/kube.sh install-node >&2 || die "tests/services/kube.sh install-node failed"
  build_kubeadm
  build_pause
  local line
  for line in "${COMPONENTS[@]}"; do build_component "${line%% *}"; done
  log "binaries ready after $(( SECONDS - start )) s"
}

build() {
  use_engine
  tests/e2e/base-images.sh ensure "debian:$DEBIAN_RELEASE-slim"
  local image recipe_hash
  image=$(image_name); recipe_hash=$(recipe)
  if [[ $(docker image inspect --format "{{index .Config.Labels \"$LABEL\"}}" "$image" 2>/dev/null) == "$recipe_hash" ]]; then
    log "$image is built (recipe $recipe_hash)"
    echo "$image"; return 0
  fi
  local start=$SECONDS
  binaries
  local context="$NODE_CACHE/context" kube_bin files
  kube_bin=$(tests/services/kube.sh env | sed -n 's/^SK_KUBE_BIN=//p')
  files=$(kind_files)
  rm -rf "$context"; mkdir -p "$context/bin" "$context/cni" "$context/kind/manifests"
  cp -r "$files" "$context/files"
  # The module cache is read-only: set the modes kind's Dockerfile gives (scripts 0755, others 0644).
  chmod -R u+w "$context/files"
  find "$context/files" -type d -exec chmod 0755 {} +
  find "$context/files" -type f -exec chmod 0644 {} +
  chmod 0755 "$context/files/usr/local/bin/"* "$context/files/kind/bin/"*
  local name
  for name in containerd ctr containerd-shim-runc-v2; do link_or_copy "$(component_dir containerd)/bin/$name" "$context/bin/$name"; done
  link_or_copy "$(component_dir crictl)/bin/crictl" "$context/bin/crictl"
  link_or_copy "$NODE_CACHE/kubeadm/kubeadm" "$context/bin/kubeadm"
  for name in kubelet kubectl; do link_or_copy "$kube_bin/$name" "$context/bin/$name"; done
  for name in host-local loopback ptp bridge portmap; do link_or_copy "$(component_dir cni-plugins)/bin/$name" "$context/cni/$name"; done
  echo "$KUBE_VERSION" > "$context/kind/version"
  cp tests/e2e/kind-node/default-cni.yaml tests/e2e/kind-node/default-storage.yaml "$context/kind/manifests/"
  cp tests/e2e/kind-node/Dockerfile "$context/Dockerfile"

  log "building the images the node preloads"
  stage_images "$context"
  log "building the node image $image"
  DOCKER_BUILDKIT=1 docker build --network host --build-arg "DEBIAN_RELEASE=$DEBIAN_RELEASE" \
    --build-arg "SANDBOX_IMAGE=$SANDBOX_IMAGE" --label "$LABEL=$recipe_hash" \
    --label "org.opencontainers.image.version=$KUBE_VERSION" -t "$image" "$context" >&2 \
    || die "docker build of the node image failed (above)"
  rm -rf "$context"
  log "$image built in $(( SECONDS - start )) s"
  echo "$image"
}

case "${1:-}" in
  build) build ;;
  binaries) binaries ;;
  name) image_name ;;
  *) die "usage: $0 build|binaries|name" ;;
esac
