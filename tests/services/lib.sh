# Shared helpers for the service scripts under tests/services. Sourced, never run.
# Everything downloaded or built lives in the cache folder, keyed by version, outside the clone,
# so CI and later sessions on the same machine reuse it and a fresh machine rebuilds it.

set -euo pipefail

SK_CACHE="${STREAMKEEPER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streamkeeper}"
# Runtime state (data dirs, pids, logs) of the services started by this checkout.
SK_RUN="${STREAMKEEPER_RUN:-$SK_CACHE/run}"
mkdir -p "$SK_CACHE" "$SK_RUN"

# Toolchains installed by rustup and the Go tarball live outside the default PATH of a
# non-login shell (as CI runs us): add their usual homes when present.
for dir in "$HOME/.cargo/bin" /usr/local/go/bin; do
  if [[ -d $dir && ":$PATH:" != *":$dir:"* ]]; then PATH="$dir:$PATH"; fi
done
export PATH

log() { printf '[%s] %s\n' "$(basename "$0")" "$*" >&2; }
die() { printf '[%s] ERROR: %s\n' "$(basename "$0")" "$*" >&2; exit 1; }

# wait_until <seconds> <description> <command...>: polls the command until it succeeds.
wait_until() {
  local limit=$1 what=$2; shift 2
  local start=$SECONDS
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS - start >= limit )); then
      return 1
    fi
    sleep 0.5
  done
  log "$what ready after $(( SECONDS - start )) s"
}

# install_debian_packages <package>...: installs those of Debian's packages that are missing
# (with sudo when not root).
install_debian_packages() {
  local missing=() package sudo=""
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed' || missing+=("$package")
  done
  ((${#missing[@]})) || return 0
  log "installing ${missing[*]} from Debian's packages"
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
}

# sbin_on_path: debootstrap, chroot and the like live in sbin, which a non-root PATH may lack.
sbin_on_path() {
  local dir
  for dir in /usr/sbin /sbin; do
    if [[ ":$PATH:" != *":$dir:"* ]]; then PATH="$PATH:$dir"; fi
  done
}

port_is_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

require_free_port() {
  port_is_free "$1" || die "port 127.0.0.1:$1 is already in use (is a previous run still up? try: $0 stop)"
}

# stop_pidfile <file> <name>: stops exactly the process this script started, then its group.
stop_pidfile() {
  local file=$1 name=$2
  [[ -f $file ]] || return 0
  local pid
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$pid" 2>/dev/null || true
    log "stopped $name (pid $pid)"
  fi
  rm -f "$file"
}

go_env() {
  export GOPATH="$SK_CACHE/go" GOMODCACHE="$SK_CACHE/go/mod" GOCACHE="$SK_CACHE/go/build"
  export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
  command -v go >/dev/null || die "go is not installed"
}
