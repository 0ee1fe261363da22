#!/usr/bin/env bash
# The stand-ins for the upstream images the e2e manifests name (apache/kafka, chrislusf/seaweedfs),
# for a node that cannot pull them: built without Docker from their Dockerfiles as OCI archives
# that containerd imports (`ctr -n k8s.io images import`). tests/e2e/images/stand-ins maps each
# upstream reference to its local one and its Dockerfile; nothing else names them.
#
#   tests/e2e/images.sh build [--out-dir DIR] [target...]   the archives (default: all), their
#                                                            paths printed one a line
#   tests/e2e/images.sh names                                the local references
#   tests/e2e/images.sh paths [--out-dir DIR]                the archives, one a line
#   tests/e2e/images.sh rewrite FILE...                      the manifests, upstream references
#                                                            replaced by the local ones, on stdout
#   tests/e2e/images.sh check [--out-dir DIR]                import both into a private containerd
#       and run them as the manifests do, on this machine's network but bound to 127.0.0.1 only:
#       a broker configured by KAFKA_* variables alone, which kafka-topics.sh, the console producer
#       and consumer, kafka-consumer-groups.sh and kafka-broker-api-versions.sh inside use, then
#       restarted on its formatted log dir; `weed server -s3` through the image's entrypoint, its
#       S3 port answering signed requests, and `sh -c 'echo ... | weed shell'` making a bucket.
#       Stops what it started.
#
# Its own script rather than targets of scripts/oci-image.sh: these are test fixtures, named by
# the table above rather than scripts/images.sh, built from what tests/services/kafka.sh and s3.sh
# install, and checked by running the services. Both use the same builder (scripts/oci_image.py)
# and the same cache ($SK_CACHE/images: the debootstrap'd Debian is shared). A Dockerfile's
# build-only stage is not built here: the tests/services script it runs has filled our cache the
# same way, and the cache stands for the stage's /cache (--stage-dir). Cold: a few minutes
# (debootstrap, the JRE from Debian's mirror); warm: seconds. Needs root for a cold build and for
# the check. REVISION/CREATED as in scripts/oci-image.sh.
# shellcheck source-path=SCRIPTDIR source-path=SCRIPTDIR/../..
source "$(dirname "$0")/../services/lib.sh"
cd "$(dirname "$0")/../.." || exit 1

for dir in /usr/sbin /sbin; do
  if [[ ":$PATH:" != *":$dir:"* ]]; then PATH="$PATH:$dir"; fi
done
STAND_INS=tests/e2e/images/stand-ins
IMAGES="$SK_CACHE/images"
OUT_DIR="$IMAGES/out"
CREATED="${CREATED:-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ 2>/dev/null \
  || echo 1970-01-01T00:00:00Z)}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# The table's rows: upstream local dockerfile target.
mapfile -t ROWS < <(grep -Ev '^[[:space:]]*(#|$)' "$STAND_INS")
(( ${#ROWS[@]} )) || die "$STAND_INS lists no image"
TARGETS=()
for row in "${ROWS[@]}"; do read -r _ _ _ target <<< "$row"; TARGETS+=("$target"); done

# row <target>: its line of the table.
row() {
  local row target
  for row in "${ROWS[@]}"; do
    read -r _ _ _ target <<< "$row"
    [[ $target == "$1" ]] && { echo "$row"; return 0; }
  done
  die "$STAND_INS has no target $1 (it has: ${TARGETS[*]})"
}
local_ref() { local ref; read -r _ ref _ <<< "$(row "$1")"; echo "$ref"; }
archive() { local ref; ref=$(local_ref "$1"); echo "$OUT_DIR/$1-${ref##*:}.oci.tar"; }

# inputs <target> <version>: installs what the Dockerfile's build-only stage would make, into our
# cache, and prints the options that stand for that stage: --stage-dir and the version's ARG.
inputs() {
  case $1 in
    kafka)
      SK_KAFKA_VERSION=$2 tests/services/kafka.sh install >&2 || die "tests/services/kafka.sh install failed"
      printf '%s\n' --stage-dir "libs:/cache=$SK_CACHE" --build-arg "KAFKA_VERSION=$2" ;;
    seaweedfs)
      SK_SEAWEEDFS_VERSION=$2 tests/services/s3.sh install >&2 || die "tests/services/s3.sh install failed"
      printf '%s\n' --stage-dir "weed:/cache=$SK_CACHE" --build-arg "SEAWEEDFS_VERSION=$2" ;;
    *) die "no inputs known for target $1: add them to inputs() in $0" ;;
  esac
}

build() {
  scripts/oci-image.sh install
  mkdir -p "$OUT_DIR"
  local target upstream ref dockerfile start options
  for target in "${TARGETS[@]}"; do
    start=$SECONDS
    read -r upstream ref dockerfile _ <<< "$(row "$target")"
    mapfile -t options < <(inputs "$target" "${upstream##*:}")
    (( ${#options[@]} )) || exit 1
    python3 -B scripts/oci_image.py --dockerfile "$dockerfile" --target "$target" --name "$ref" \
      --context . "${options[@]}" --cache "$IMAGES" --out "$(archive "$target")" \
      --created "$CREATED" --mirror "$MIRROR" || die "building $ref failed (above)"
    log "$ref (for $upstream) built in $(( SECONDS - start )) s"
  done
  for target in "${TARGETS[@]}"; do archive "$target"; done
}

# rewrite FILE...: the manifests with `image: <upstream>` replaced by the local reference.
rewrite() {
  (($#)) || die "rewrite needs manifest files"
  local expressions=() row upstream ref
  for row in "${ROWS[@]}"; do
    read -r upstream ref _ <<< "$row"
    expressions+=(-e "s#^\([[:space:]-]*image:[[:space:]]*[\"']\{0,1\}\)${upstream//./\\.}\([\"']\{0,1\}[[:space:]]*\)\$#\1$ref\2#")
  done
  sed "${expressions[@]}" "$@"
}

verb="${1:-}"
shift || true
files=()
while (($#)); do
  case "$1" in
    --out-dir) OUT_DIR="${2:?--out-dir needs a folder}"; shift 2 ;;
    -*) die "unknown option $1" ;;
    *) files+=("$1"); shift ;;
  esac
done
if [[ $verb != rewrite && ${#files[@]} -gt 0 ]]; then
  for target in "${files[@]}"; do row "$target" >/dev/null; done
  TARGETS=("${files[@]}")
fi
case "$verb" in
  build) build ;;
  names) for target in "${TARGETS[@]}"; do local_ref "$target"; done ;;
  paths) for target in "${TARGETS[@]}"; do archive "$target"; done ;;
  rewrite) rewrite "${files[@]}" ;;
  check) source tests/e2e/images-check.sh; check ;;
  *) die "usage: $0 build|names|paths|check [--out-dir DIR] [target...] | rewrite FILE..." ;;
esac
