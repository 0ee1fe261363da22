#!/bin/sh
# The entrypoint of the chrislusf/seaweedfs stand-in (tests/e2e/images/seaweedfs/Dockerfile), doing
# what upstream's /entrypoint.sh does for its subcommands:
#   - GODEBUG gets fips140=on unless it says otherwise (upstream's default FIPS 140-3 mode);
#   - started as root, it gives /data to the seaweed user when it does not own it already, then
#     runs itself again as seaweed (setpriv here, su-exec upstream);
#   - master, volume, server, mini, filer and s3 run `weed -logtostderr=true <command>` with
#     upstream's defaults put before the arguments (server: -dir=/data -volume.max=0
#     -master.volumeSizeLimitMB=1024, without -volume.max=0 when the arguments set -volume.max);
#   - shell pipes its arguments into `weed shell` with the SHELL_* variables as flags;
#   - anything else runs `weed <arguments>` as given.
# Upstream's Rust servers (volume-rust, worker) are not in this image: those commands reach weed,
# which refuses them.
export GODEBUG="${GODEBUG:+$GODEBUG,}fips140=on"

if [ "$(id -u)" = 0 ]; then
  if ! uid=$(id -u seaweed) || ! gid=$(id -g seaweed); then
    echo "Error: 'seaweed' user or group not found. Cannot fix permissions." >&2
    exit 1
  fi
  if [ "$(stat -c %u /data 2>/dev/null)" != "$uid" ] || [ "$(stat -c %g /data 2>/dev/null)" != "$gid" ]; then
    echo "Fixing /data ownership for seaweed user (uid=$uid, gid=$gid)"
    chown -R seaweed:seaweed /data || echo "Warning: Failed to change ownership of /data." >&2
  fi
  # su-exec sets HOME to the user's; setpriv leaves it alone.
  HOME=$(getent passwd seaweed | cut -d: -f6)
  export HOME
  exec setpriv --reuid="$uid" --regid="$gid" --init-groups "$0" "$@"
fi

# is_arg_passed <flag> <arguments...>: the arguments set the flag (-flag, --flag, with =value or not).
is_arg_passed() {
  flag=$1
  shift
  for passed in "$@"; do
    case $passed in
      "$flag" | "-$flag" | "$flag="* | "-$flag="*) return 0 ;;
    esac
  done
  return 1
}

[ $# -gt 0 ] || exec /usr/bin/weed
command=$1
shift
case "$command" in
  master)
    exec /usr/bin/weed -logtostderr=true master -mdir=/data -volumeSizeLimitMB=1024 "$@" ;;
  volume)
    if is_arg_passed -max "$@"; then
      exec /usr/bin/weed -logtostderr=true volume -dir=/data "$@"
    fi
    exec /usr/bin/weed -logtostderr=true volume -dir=/data -max=0 "$@" ;;
  server)
    if is_arg_passed -volume.max "$@"; then
      exec /usr/bin/weed -logtostderr=true server -dir=/data -master.volumeSizeLimitMB=1024 "$@"
    fi
    exec /usr/bin/weed -logtostderr=true server -dir=/data -volume.max=0 \
      -master.volumeSizeLimitMB=1024 "$@" ;;
  mini)
    if is_arg_passed -dir "$@"; then
      exec /usr/bin/weed -logtostderr=true mini "$@"
    fi
    exec /usr/bin/weed -logtostderr=true mini -dir=/data "$@" ;;
  filer)
    exec /usr/bin/weed -logtostderr=true filer "$@" ;;
  s3)
    exec /usr/bin/weed -logtostderr=true s3 -domainName="${S3_DOMAIN_NAME:-}" \
      -key.file="${S3_KEY_FILE:-}" -cert.file="${S3_CERT_FILE:-}" "$@" ;;
  shell)
    echo "$@" | exec /usr/bin/weed -logtostderr=true shell -cluster="${SHELL_CLUSTER:-}" \
      -filer="${SHELL_FILER:-}" -filerGroup="${SHELL_FILER_GROUP:-}" -master="${SHELL_MASTER:-}" \
      -options="${SHELL_OPTIONS:-}" ;;
  *)
    exec /usr/bin/weed "$command" "$@" ;;
esac
