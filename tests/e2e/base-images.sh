#!/usr/bin/env bash
# The base images our Dockerfiles start FROM, in the local Docker engine: pulled where a registry
# answers, and where none does (this machine, an air-gapped one) a stand-in built here and tagged
# with the upstream name, so `docker build` runs the Dockerfiles unchanged.
#
#   tests/e2e/base-images.sh ensure IMAGE...   each one present (kept), pulled, or a stand-in built
#   tests/e2e/base-images.sh stand-in IMAGE    build the stand-in even if the image could be pulled
#
# Stand-ins this script knows how to build:
#   debian:<release>-slim   `debootstrap --variant=minbase` with debian:<release>-slim's minimizing
#                           config (debuerreotype's: apt keeps no caches, dpkg skips docs, man pages
#                           and locales), imported with `docker import`. This is the one thing
#                           Docker cannot do for us: it has no way to make a first image without a
#                           registry. The rootfs tarball is cached ($SK_CACHE/stand-ins), so a
#                           wiped engine re-imports it in seconds.
#
# A stand-in carries the label dev.streamkeeper.stand-in=<what it stands for>. Needs root for a
# cold debian stand-in (debootstrap). DEBIAN_MIRROR picks the mirror.
# shellcheck source-path=SCRIPTDIR source-path=SCRIPTDIR/../..
source "$(dirname "$0")/../services/lib.sh"
cd "$(dirname "$0")/../.." || exit 1

sbin_on_path
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
STAND_INS="$SK_CACHE/stand-ins"
# Bump when a stand-in's recipe changes, so images and tarballs made the old way are rebuilt.
RECIPE=3
LABEL=dev.streamkeeper.stand-in

# The engine: the caller's DOCKER_HOST, else the one tests/services/docker.sh runs; with that one,
# its own client (a newer docker CLI without buildx refuses DOCKER_BUILDKIT=1).
ours=$(tests/services/docker.sh env | sed -n 's/^DOCKER_HOST=//p')
if [[ -z ${DOCKER_HOST:-} || $DOCKER_HOST == "$ours" ]]; then
  while IFS= read -r line; do export "${line?}"; done < <(tests/services/docker.sh env)
fi
DOCKER="${SK_DOCKER:-$(type -P docker)}"
[[ -x $DOCKER ]] || die "docker is not installed"
docker() { "$DOCKER" "$@"; }
docker info >/dev/null 2>&1 || die "no Docker engine answers at ${DOCKER_HOST} (start one: tests/services/docker.sh start)"

label_value() { echo "$1, recipe $RECIPE"; }
# stand_in_of <image>: what the image stands for if it is a stand-in of the current recipe.
stand_in_of() { docker image inspect --format "{{index .Config.Labels \"$LABEL\"}}" "$1" 2>/dev/null; }

debian_slim() { # debian_slim <image> <release>
  local image=$1 release=$2
  local tarball="$STAND_INS/debian-$release-slim-r$RECIPE.tar"
  if [[ ! -f $tarball ]]; then
    [[ $(id -u) -eq 0 ]] || die "building the $image stand-in needs root (debootstrap)"
    install_debian_packages debootstrap
    local work="$STAND_INS/debian-$release-slim.building" start=$SECONDS
    rm -rf "$work"; mkdir -p "$work"
    log "debootstrap --variant=minbase $release ($MIRROR), for the $image stand-in; log: $work/debootstrap.log"
    debootstrap --variant=minbase --arch="$(dpkg --print-architecture)" "$release" "$work/rootfs" "$MIRROR" \
      > "$work/debootstrap.log" 2>&1 || die "debootstrap failed; end of $work/debootstrap.log: $(tail -n 15 "$work/debootstrap.log")"
    slim "$work/rootfs" "$release"
    tar -C "$work/rootfs" --numeric-owner --xattrs -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
    rm -rf "$work"
    log "debian $release rootfs made in $(( SECONDS - start )) s: $tarball"
  fi
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' --change "LABEL $LABEL=\"$(label_value "$image")\"" \
    --message "stand-in for $image (tests/e2e/base-images.sh)" "$tarball" "$image" >/dev/null \
    || die "docker import of $tarball as $image failed"
}

# slim <rootfs> <release>: what debian:<release>-slim carries beyond debootstrap.
slim() {
  local root=$1 release=$2
  rm -f "$root/etc/apt/sources.list"
  cat > "$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: http://deb.debian.org/debian
Suites: $release $release-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $release-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  local clean='"rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"'
  printf 'DPkg::Post-Invoke { %s; };\nAPT::Update::Post-Invoke { %s; };\nDir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n' \
    "$clean" "$clean" > "$root/etc/apt/apt.conf.d/docker-clean"
  echo 'Apt::AutoRemove::SuggestsImportant "false";' > "$root/etc/apt/apt.conf.d/docker-autoremove-suggests"
  echo 'Acquire::GzipIndexes "true";' > "$root/etc/apt/apt.conf.d/docker-gzip-indexes"
  echo 'Acquire::Languages "none";' > "$root/etc/apt/apt.conf.d/docker-no-languages"
  local excludes=('/usr/share/doc/*' '/usr/share/groff/*' '/usr/share/info/*' '/usr/share/linda/*'
    '/usr/share/lintian/overrides/*' '/usr/share/locale/*' '/usr/share/man/*')
  { printf 'path-exclude %s\n' "${excludes[@]}"; echo 'path-include /usr/share/doc/*/copyright'; } \
    > "$root/etc/dpkg/dpkg.cfg.d/docker"
  find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{groff,info,linda,locale,man}/* "$root/usr/share/lintian/overrides"/*
  # What a build leaves that no image should carry: logs, apt lists and caches, the host's names.
  find "$root/var/log" "$root/var/cache/apt" "$root/var/lib/apt/lists" -type f -delete
  rm -rf "$root/tmp"/* "$root/var/cache/ldconfig/aux-cache" "$root"/var/lib/dpkg/*-old
  : > "$root/etc/hostname"; rm -f "$root/etc/resolv.conf"; : > "$root/etc/resolv.conf"
}

rust_slim() { # rust_slim <image> <version> <release>
  local image=$1 version=$2 release=$3 toolchain
  ensure "debian:$release-slim"
  toolchain=$(rustup_toolchain "$version")
  local context="$STAND_INS/rust-$version-context" part
  rm -rf "$context"; mkdir -p "$context/toolchain"
  cp tests/e2e/images/rust/Dockerfile "$context/Dockerfile"
  # The CAs this machine adds to Debian's (a TLS-inspecting proxy's, say): cargo inside needs them.
  mkdir -p "$context/ca"
  find /usr/local/share/ca-certificates -name '*.crt' -exec cp {} "$context/ca/" \; 2>/dev/null || true
  # Hard links where the file system allows it (the toolchain is ~600 MB without its docs).
  for part in bin lib libexec etc; do
    [[ -e $toolchain/$part ]] || continue
    cp -al "$toolchain/$part" "$context/toolchain/" 2>/dev/null || cp -a "$toolchain/$part" "$context/toolchain/"
  done
  log "building the $image stand-in from $toolchain"
  DOCKER_BUILDKIT=1 docker build --network host --build-arg "DEBIAN_RELEASE=$release" \
    --build-arg "RUST_VERSION=$version" --build-arg "TOOLCHAIN=$(basename "$toolchain")" --label "$LABEL=$(label_value "$image")" -t "$image" "$context" \
    || die "building the $image stand-in failed (above)"
  rm -rf "$context"
}

# rustup_toolchain <version>: this machine's toolchain folder of that Rust version (1.95 matches
# 1.95.x), installing it with rustup if missing.
rustup_toolchain() {
  local home="${RUSTUP_HOME:-$HOME/.rustup}" dir
  for dir in "$home/toolchains/$1"-* "$home/toolchains/$1".*-*; do
    [[ -x $dir/bin/rustc ]] && { readlink -f "$dir"; return 0; }
  done
  if [[ $1 == $(rustc --version 2>/dev/null | awk '{print $2}' | cut -d. -f1-2) ]]; then
    dir=$(rustc --print sysroot) && [[ -x $dir/bin/rustc ]] && { echo "$dir"; return 0; }
  fi
  command -v rustup >/dev/null || die "no Rust $1 toolchain here, and no rustup to install it"
  rustup toolchain install "$1" --profile minimal >&2 || die "rustup toolchain install $1 failed"
  rustup_toolchain "$1"
}

build_stand_in() {
  case $1 in
    debian:*-slim) local release=${1#debian:}; debian_slim "$1" "${release%-slim}" ;;
    rust:*-slim-*) local tag=${1#rust:}; rust_slim "$1" "${tag%%-slim-*}" "${tag##*-slim-}" ;;
    *) die "no stand-in known for $1 (known: debian:<release>-slim, rust:<version>-slim-<release>)" ;;
  esac
  log "$1: stand-in built ($(stand_in_of "$1"))"
}

ensure() {
  local image
  for image in "$@"; do
    local of
    of=$(stand_in_of "$image") || of=missing
    if [[ $of == missing ]]; then
      if docker pull -q "$image" >/dev/null 2>&1; then log "$image: pulled"; continue; fi
      log "$image: cannot be pulled here; building a stand-in"
      build_stand_in "$image"
    elif [[ -n $of && $of != "$(label_value "$image")" ]]; then
      log "$image: a stand-in of an older recipe ($of); building it again"
      build_stand_in "$image"
    fi
  done
}

verb=${1:-}
shift || true
case "$verb" in
  ensure) (($#)) || die "ensure needs image names"; ensure "$@" ;;
  stand-in) (($# == 1)) || die "stand-in needs one image name"; build_stand_in "$1" ;;
  *) die "usage: $0 ensure IMAGE... | stand-in IMAGE" ;;
esac
