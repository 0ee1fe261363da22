#!/usr/bin/env bash
# Builds the example WebAssembly guests into OUT_DIR (default $SK_CACHE/wasm/guests):
#
#   examples/wasm/build.sh [OUT_DIR]     python-velocity.wasm (componentize-py, from PyPI)
#
# componentize-py is installed once into a virtualenv under $SK_CACHE/wasm-tools (pinned below);
# a guest is rebuilt only when its sources or the WIT changed. Prints the built files' paths.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/../../tests/services/lib.sh"
cd "$(dirname "$0")/../.." || exit 1

COMPONENTIZE_PY_VERSION=0.25.1
OUT_DIR="${1:-$SK_CACHE/wasm/guests}"
TOOLS="$SK_CACHE/wasm-tools"
mkdir -p "$OUT_DIR" "$TOOLS"

componentize_py() {
  local venv="$TOOLS/venv-componentize-py-$COMPONENTIZE_PY_VERSION"
  if [[ ! -x $venv/bin/componentize-py ]]; then
    log "installing componentize-py $COMPONENTIZE_PY_VERSION into $venv"
    python3 -m venv "$venv" >&2 || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
    "$venv/bin/pip" install -q "componentize-py==$COMPONENTIZE_PY_VERSION" >&2 \
      || die "pip install componentize-py==$COMPONENTIZE_PY_VERSION failed"
  fi
  echo "$venv/bin/componentize-py"
}

# build_python <name> <module dir> <module>: one Python guest, when its inputs changed.
build_python() {
  local name=$1 dir=$2 module=$3 out="$OUT_DIR/$1.wasm"
  local stamp; stamp="$(cat wit/*.wit "$dir"/*.py | sha256sum | cut -c1-16)"
  if [[ -f $out && -f $out.stamp && $(cat "$out.stamp") == "$stamp" ]]; then
    echo "$out"; return 0
  fi
  local tool; tool="$(componentize_py)" || exit 1
  log "building $name from $dir/$module.py"
  (cd "$dir" && "$tool" -d ../../../wit -w processor componentize "$module" -o "$out.tmp") >&2 \
    || die "componentize-py failed for $name"
  mv "$out.tmp" "$out" && echo "$stamp" > "$out.stamp"
  echo "$out"
}

build_python python-velocity examples/wasm/python app
