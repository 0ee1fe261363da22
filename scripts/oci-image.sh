#!/usr/bin/env bash
# Builds the operator and worker images without a Docker engine, as OCI image layout archives
# that containerd imports (`ctr -n k8s.io images import`, `kind load image-archive`):
#
#   scripts/oci-image.sh install                 debootstrap (apt-get), if missing
#   scripts/oci-image.sh build [options] [target...]   the archives (default: operator worker)
#       --profile debug|release   which cargo build's binaries (default debug, what the tests build)
#       --bin-dir DIR             take the binaries from DIR instead
#       --out-dir DIR             write the archives there (default $SK_CACHE/images/out)
#   scripts/oci-image.sh names [target...]       the image references (scripts/images.sh names)
#   scripts/oci-image.sh paths [--out-dir DIR] [target...]   the archives, one a line, in the
#                                                names' order
#   scripts/oci-image.sh check [--out-dir DIR] [target...]   import them into a private containerd
#                                                (own root, state and socket under /tmp) and run
#                                                each binary's --help inside, as the image's user,
#                                                on a read-only root; stops what it started
#
# Targets: operator, worker, and velocity-check (examples/custom-processor, the worker with a
# processor of its own; binary velocity-check). The example is built only when named: the
# end-to-end scenario loads every default archive into its node and does not run it.
#
# scripts/oci_image.py does the work from ./Dockerfile alone: the runtime stage becomes a
# debootstrap'd Debian (the stage's FROM release, minbase) on which the stage's own RUN runs in a
# chroot, so RUNTIME_PACKAGES and the nonroot user are the Dockerfile's; the builder stage is not
# built: cargo's output folder stands for its /out. The debootstrap'd Debian is kept in
# $SK_CACHE/images/debian-<release>-<arch>-r<recipe> (tests/e2e/images.sh's stand-ins start from
# it too), the runtime rootfs and its layer in $SK_CACHE/images/runtime-<hash of release and RUN>;
# a rebuild after a code change re-tars only the binary layer. Cold: a few minutes (network); warm: seconds. Needs root for the
# cold build (debootstrap, chroot). Names, VERSION and REGISTRY are scripts/images.sh's;
# REVISION and CREATED (the OCI labels) default to HEAD and its commit time, so the same commit
# and binaries give the same archive. DEBIAN_MIRROR picks the debootstrap mirror.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/../tests/services/lib.sh"
cd "$(dirname "$0")/.." || exit 1

sbin_on_path
IMAGES="$SK_CACHE/images"
OUT_DIR="$IMAGES/out"
PROFILE=debug
BIN_DIR=""
TARGETS=(operator worker)
KNOWN_TARGETS=(operator worker velocity-check)
REVISION="${REVISION:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
CREATED="${CREATED:-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null \
  || echo 1970-01-01T00:00:00Z)}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

install() {
  command -v debootstrap >/dev/null && return 0
  [[ $(id -u) -eq 0 ]] || die "debootstrap is missing and installing it needs root: apt-get install debootstrap"
  log "installing debootstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || die "apt-get install debootstrap failed"
}

# name <target>: its reference, from scripts/images.sh's own rule.
name() {
  local line
  while IFS= read -r line; do
    [[ $line == */"$1":* ]] && { echo "$line"; return 0; }
  done < <(scripts/images.sh names "$1")
  die "scripts/images.sh names prints no image for target $1"
}

# binary <target>: the binary the target's stage copies from the builder's /out (its ENTRYPOINT).
binary() {
  case $1 in
    velocity-check) echo velocity-check ;;
    *) echo "streamkeeper-$1" ;;
  esac
}

archive() { local ref; ref=$(name "$1"); echo "$OUT_DIR/$1-${ref##*:}.oci.tar"; }

# full_name <ref>: what containerd and the kubelet call it (docker.io/ unless it names a registry).
full_name() {
  local first=${1%%/*}
  if [[ $first == *[.:]* || $first == localhost ]]; then echo "$1"; else echo "docker.io/$1"; fi
}

build() {
  local bin_dir=${BIN_DIR:-${CARGO_TARGET_DIR:-$SK_CACHE/cargo-target}/$PROFILE}
  install
  mkdir -p "$OUT_DIR"
  for target in "${TARGETS[@]}"; do
    local ref bin start=$SECONDS
    ref=$(name "$target")
    bin=$(binary "$target")
    [[ -f $bin_dir/$bin ]] || die "$bin_dir/$bin is missing: build" \
      "it first (cargo build --workspace, with --release for the release profile)"
    # The Dockerfile's builder stage leaves the binaries in /out: here cargo's output stands for it.
    python3 -B scripts/oci_image.py --dockerfile Dockerfile --target "$target" --name "$ref" \
      --context . --stage-dir "builder:/out=$bin_dir" --cache "$IMAGES" --out "$(archive "$target")" \
      --created "$CREATED" --mirror "$MIRROR" --build-arg "VERSION=${ref##*:}" \
      --build-arg "REVISION=$REVISION" --build-arg "CREATED=$CREATED" || die "building $ref failed (above)"
    log "$ref built in $(( SECONDS - start )) s"
  done
}

# A private containerd (scripts/private-containerd.sh): nothing of the machine's own is touched.
CHECK_DIR=/tmp/sk-containerd
# shellcheck source=scripts/private-containerd.sh
source scripts/private-containerd.sh

check() {
  [[ $(id -u) -eq 0 ]] || die "running containers needs root"
  start_containerd
  trap stop_containerd EXIT
  for target in "${TARGETS[@]}"; do
    local ref file bin
    ref=$(name "$target")
    file=$(archive "$target")
    bin=$(binary "$target")
    [[ -f $file ]] || die "$file is missing: run $0 build"
    pctr images import "$file" || die "importing $file failed"
    # ctr 1.6 has no --user: the process runs as the image config's User, which this prints.
    # shellcheck disable=SC2016 # expanded in the container
    pctr run --rm --read-only "$(full_name "$ref")" "sk-check-$target" \
      /bin/sh -c 'echo "running as $(id -u):$(id -g)"; exec "$0" --help' \
      "/usr/local/bin/$bin" || die "$bin --help failed in $ref"
  done
  pctr images ls
}

verb="${1:-}"
shift || true
while (($#)); do
  case "$1" in
    --profile) PROFILE="${2:?--profile needs debug or release}"; shift 2 ;;
    --bin-dir) BIN_DIR="${2:?--bin-dir needs a folder}"; shift 2 ;;
    --out-dir) OUT_DIR="${2:?--out-dir needs a folder}"; shift 2 ;;
    operator|worker|velocity-check) [[ ${picked:-} ]] || TARGETS=(); picked=1; TARGETS+=("$1"); shift ;;
    *) die "unknown argument $1 (targets: ${KNOWN_TARGETS[*]})" ;;
  esac
done
case "$verb" in
  install) install ;;
  build) build ;;
  names) for target in "${TARGETS[@]}"; do name "$target"; done ;;
  paths) for target in "${TARGETS[@]}"; do archive "$target"; done ;;
  check) check ;;
  *) die "usage: $0 install|build|names|paths|check [--profile debug|release] [--bin-dir DIR] [--out-dir DIR] [operator|worker|velocity-check...]" ;;
esac
