#!/usr/bin/env bash
# Builds the example WebAssembly guests into OUT_DIR (default $SK_CACHE/wasm/guests):
#
#   examples/wasm/build.sh [OUT_DIR]
#     python-velocity.wasm, python-count.wasm, python-describe.wasm
#                                   examples/wasm/python, with componentize-py (PyPI)
#     c-velocity.wasm, c-count.wasm examples/wasm/c, with clang for wasm32-wasi
#
# Every tool is pinned below and installed once, on first use, under $SK_CACHE/wasm-tools:
# componentize-py into a virtualenv; for C, Debian's clang, wasm-ld, wasi-libc and compiler-rt
# (apt), wit-bindgen and wasm-tools (cargo install from crates.io), and Wasmtime's WASI
# preview-1 reactor adapter (from its crate, checked against a pinned SHA-256). A guest is
# rebuilt only when its inputs changed (a stamp beside it); each is checked to be a component
# of the processor world that imports nothing but the host and WASI. Prints the built paths.
# shellcheck source-path=SCRIPTDIR
source "$(dirname "$0")/../../tests/services/lib.sh"
# OUT_DIR is taken from where the script is called, before it moves to the repository's root.
OUT_DIR="${1:-$SK_CACHE/wasm/guests}"
mkdir -p "$OUT_DIR" && OUT_DIR="$(cd "$OUT_DIR" && pwd)"
cd "$(dirname "$0")/../.." || exit 1

COMPONENTIZE_PY_VERSION=0.25.1
# The C toolchain. wasm-tools and wit-bindgen are the releases built on the same wasmparser and
# wit-component (0.254) as Wasmtime 48 (Cargo.lock), so what they make is what it reads; the
# adapter is the one released with Wasmtime 48 (the newest 48.x of its crate).
WASM_TOOLS_VERSION=1.254.2
WIT_BINDGEN_VERSION=0.60.0
ADAPTER_VERSION=48.0.8
ADAPTER_SHA256=134b86dc09c6b62077f2307b96fa8b83b94dc86737bc705ac3dbe27cb107b1f9
# Debian's: clang's default version and the wasm32 parts that go with it.
C_PACKAGES=(clang lld wasi-libc libclang-rt-dev-wasm32)
CFLAGS=(--target=wasm32-wasi -O2 -Wall -Wextra)
# A reactor: no main, the exports are called; the debug sections are dropped (the names stay,
# so a trap's backtrace still names the function).
LDFLAGS=(--target=wasm32-wasi -mexec-model=reactor "-Wl,--strip-debug")

# The interface's version, as wit/processor.wit declares it.
WIT_VERSION="$(sed -n 's/^package streamkeeper:processor@\(.*\);$/\1/p' wit/processor.wit)"
[[ -n $WIT_VERSION ]] || die "wit/processor.wit declares no streamkeeper:processor package"

TOOLS="$SK_CACHE/wasm-tools"
mkdir -p "$TOOLS"
# One run at a time on this machine: test binaries and the benchmark call this script, and two
# first runs must not install the same tools into the same place at once.
exec {lock}>"$TOOLS/.build.lock"
flock "$lock"
# What a run generates on the way (bindings, objects, core modules), gone when it ends.
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT

# up_to_date <out> <stamp>: whether <out> was built from inputs with this stamp.
up_to_date() {
  [[ -f $1 && -f $1.stamp && $(cat "$1.stamp") == "$2" ]]
}

# stamp <pins...> -- <files...>: a digest of the pins and the files' contents.
stamp() {
  local pins=()
  while [[ $1 != -- ]]; do pins+=("$1"); shift; done
  shift
  { printf '%s\n' "${pins[@]}"; cat "$@"; } | sha256sum | cut -c1-16
}

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

# cargo_tool <crate> <version> <binary> <features>: the path of <binary>, installed once.
cargo_tool() {
  local crate=$1 version=$2 binary=$3 features=$4
  local root="$TOOLS/$crate-$version"
  if [[ ! -x $root/bin/$binary ]]; then
    command -v cargo >/dev/null || die "cargo is missing: install Rust with rustup (https://rustup.rs)"
    log "installing $crate $version into $root (cargo install, once: a minute or two)"
    # Its own target dir, never the workspace's, removed afterwards. Unoptimised: the tools
    # only ever see components of kilobytes to a few megabytes, and it halves the build.
    CARGO_TARGET_DIR="$TOOLS/build" CARGO_PROFILE_RELEASE_OPT_LEVEL=0 \
      CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
      cargo install --locked --quiet --version "$version" --no-default-features \
      --features "$features" --root "$root" "$crate" >&2 \
      || die "cargo install $crate $version failed"
    rm -rf "$TOOLS/build"
  fi
  echo "$root/bin/$binary"
}

wasm_tools() { cargo_tool wasm-tools "$WASM_TOOLS_VERSION" wasm-tools component,validate; }
wit_bindgen() { cargo_tool wit-bindgen-cli "$WIT_BINDGEN_VERSION" wit-bindgen c; }

# The WASI preview-1 reactor adapter: wasi-libc speaks preview 1, the host offers preview 2.
# Wasmtime ships it in a crate of its own; cargo fetches that (through whatever registry it is
# set up with) for a throwaway manifest, and the file is checked against its pinned digest.
adapter() {
  local dir="$TOOLS/wasi-preview1-adapter-$ADAPTER_VERSION"
  local file="$dir/wasi_snapshot_preview1.reactor.wasm"
  if [[ ! -f $file ]]; then
    log "fetching wasi-preview1-component-adapter-provider $ADAPTER_VERSION"
    local scratch="$SCRATCH/fetch-adapter"
    mkdir -p "$scratch"
    printf '[package]\nname = "fetch-adapter"\nversion = "0.0.0"\nedition = "2021"\n[lib]\npath = "lib.rs"\n[dependencies]\nwasi-preview1-component-adapter-provider = "=%s"\n' \
      "$ADAPTER_VERSION" > "$scratch/Cargo.toml"
    touch "$scratch/lib.rs"
    local source
    source="$(cargo metadata --quiet --format-version 1 --manifest-path "$scratch/Cargo.toml" | python3 -c '
import json, os, sys
for package in json.load(sys.stdin)["packages"]:
    if package["name"] == "wasi-preview1-component-adapter-provider":
        print(os.path.dirname(package["manifest_path"]))')" || die "cargo could not fetch the adapter crate"
    mkdir -p "$dir"
    cp "$source/artefacts/wasi_snapshot_preview1.reactor.wasm" "$file.tmp" || die "no adapter in $source"
    mv "$file.tmp" "$file"
  fi
  echo "$ADAPTER_SHA256  $file" | sha256sum --check --status \
    || die "$file is not the pinned adapter (sha256 $ADAPTER_SHA256)"
  echo "$file"
}

# check <file>: a valid component that exports the processor world's functions and imports
# nothing but the host's interfaces and WASI preview 2 (the worker links nothing else).
check() {
  local file=$1 tool wit stray wanted
  tool="$(wasm_tools)" || exit 1
  "$tool" validate --features component-model "$file" >&2 || die "$file is not a valid component"
  wit="$("$tool" component wit "$file")" || die "$file: no WIT in it"
  for wanted in 'init: func(config: string) -> result<_, string>' \
                'process: func(input: input-record) -> result<_, failure>' \
                'advance: func(stream-time-ms: s64) -> result<_, failure>'; do
    grep -qF "  export $wanted;" <<<"$wit" || die "$file does not export $wanted"
  done
  grep -qF "  use streamkeeper:processor/types@$WIT_VERSION.{input-record, failure};" <<<"$wit" \
    || die "$file is not built against streamkeeper:processor@$WIT_VERSION"
  # Other exports are allowed (componentize-py adds the hook it pre-initialises through).
  stray="$(sed -n '/^world /,/^}/p' <<<"$wit" | grep -E '^  import ' \
    | grep -vF -e "  import streamkeeper:processor/host@$WIT_VERSION;" \
      -e "  import streamkeeper:processor/types@$WIT_VERSION;" \
    | grep -vE '^  import wasi:[a-z-]+/[a-z-]+@0\.2\.[0-9]+;$' \
    || true)"
  [[ -z $stray ]] || die "$file imports more than the host and WASI: $stray"
}

# build_python <name> <module dir> <module>: one Python guest, when its inputs changed.
build_python() {
  local name=$1 dir=$2 module=$3 out="$OUT_DIR/$1.wasm"
  local digest; digest="$(stamp "$COMPONENTIZE_PY_VERSION" -- wit/*.wit "$dir/$module.py")"
  if up_to_date "$out" "$digest"; then
    echo "$out"; return 0
  fi
  local tool; tool="$(componentize_py)" || exit 1
  log "building $name from $dir/$module.py"
  # From a copy: componentize-py leaves compiled bytecode (__pycache__) beside the module.
  local build="$SCRATCH/$name" wit="$PWD/wit"
  mkdir -p "$build" && cp "$dir/$module.py" "$build/"
  (cd "$build" && "$tool" -d "$wit" -w processor componentize "$module" -o "$out.tmp") >&2 \
    || die "componentize-py failed for $name"
  check "$out.tmp"
  mv "$out.tmp" "$out" && echo "$digest" > "$out.stamp"
  echo "$out"
}

# build_c <name> <source>: one C guest from examples/wasm/c, when its inputs changed. The
# bindings are generated into the run's scratch dir (never checked in), the files compiled and
# linked to a core module, and the module made a component with the adapter.
build_c() {
  local name=$1 source=$2 out="$OUT_DIR/$1.wasm" dir=examples/wasm/c
  local digest
  digest="$(stamp "$WIT_BINDGEN_VERSION" "$WASM_TOOLS_VERSION" "$ADAPTER_SHA256" \
    "${C_PACKAGES[*]}" "${CFLAGS[*]}" "${LDFLAGS[*]}" -- wit/*.wit "$dir"/*.h "$dir/json.c" "$dir/$source")"
  if up_to_date "$out" "$digest"; then
    echo "$out"; return 0
  fi
  install_debian_packages "${C_PACKAGES[@]}"
  local bindgen tool adapter_file build
  bindgen="$(wit_bindgen)" && tool="$(wasm_tools)" && adapter_file="$(adapter)" || exit 1
  build="$SCRATCH/$name"
  mkdir -p "$build"
  log "building $name from $dir/$source"
  "$bindgen" c --world processor --out-dir "$build" wit >"$build/bindgen.log" 2>&1 \
    || { cat "$build/bindgen.log" >&2; die "wit-bindgen c failed"; }
  # The generated code is compiled without warnings: it is not ours to fix.
  if ! { clang "${CFLAGS[@]}" -w -c "$build/processor.c" -o "$build/processor.o" \
      && clang "${CFLAGS[@]}" -I "$build" -c "$dir/json.c" -o "$build/json.o" \
      && clang "${CFLAGS[@]}" -I "$build" -c "$dir/$source" -o "$build/guest.o" \
      && clang "${LDFLAGS[@]}" -o "$build/core.wasm" "$build/guest.o" "$build/json.o" \
        "$build/processor.o" "$build/processor_component_type.o"; }; then
    die "clang failed for $name"
  fi
  "$tool" component new "$build/core.wasm" --adapt "wasi_snapshot_preview1=$adapter_file" \
    -o "$out.tmp" || die "wasm-tools component new failed for $name"
  check "$out.tmp"
  mv "$out.tmp" "$out" && echo "$digest" > "$out.stamp"
  echo "$out"
}

build_python python-velocity examples/wasm/python app
build_python python-count examples/wasm/python count
build_python python-describe examples/wasm/python describe
build_c c-velocity velocity.c
build_c c-count count.c
