# The streamkeeper images, from one build of the workspace:
#   docker build --target operator       -t streamkeeper/operator:0.1.0 .
#   docker build --target worker         -t streamkeeper/worker:0.1.0 .
#   docker build --target velocity-check -t streamkeeper/velocity-check:0.1.0 .
# The third is examples/custom-processor: a user's own worker build (the stock worker plus a
# processor of its own), built here so the example's image is known to build and start.
# (scripts/images.sh builds, loads and pushes the first two by default, the example when named,
# multi-arch with buildx.) All targets share the builder stage, so a later build reuses the first
# one's compile.
#
# RocksDB and librdkafka are C/C++ built from source by their crates; the runtime stage carries
# the shared libraries the binaries link against (tests/images.rs checks the list with ldd).
#
# No `# syntax=` line: BuildKit would pull that frontend image from Docker Hub before building,
# which fails where no registry answers; its built-in Dockerfile frontend (Docker 20.10 and
# later) has everything used here, cache mounts included. The builder stage downloads Debian
# packages and crates: where containers have no outbound NAT, build with `--network host`
# (scripts/images.sh build does).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS builder
# bindgen needs libclang (rocksdb); librdkafka's cmake build needs cmake, curl, ssl and sasl headers.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      clang libclang-dev cmake make g++ pkg-config \
      libcurl4-openssl-dev libssl-dev libsasl2-dev zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# --workspace: the root package is the operator, so without it `--bin` sees only the operator's
# binaries (cargo: "no bin target named `streamkeeper-worker` in default-run packages").
# Dependency layer: the manifests and stub sources only, so a change to our own code does not
# rebuild RocksDB and librdkafka. Every target a manifest declares needs a stub file, or cargo
# refuses the manifest (tests/images.rs checks this list against `cargo metadata`).
COPY Cargo.toml Cargo.lock ./
COPY contract/Cargo.toml contract/
COPY failpoint/Cargo.toml failpoint/
COPY kafka-topic-id/Cargo.toml kafka-topic-id/
COPY worker/Cargo.toml worker/
COPY examples/custom-processor/Cargo.toml examples/custom-processor/
COPY test-tools/local-node/Cargo.toml test-tools/local-node/
COPY test-tools/test-support/Cargo.toml test-tools/test-support/
COPY test-tools/fleet-workers/Cargo.toml test-tools/fleet-workers/
RUN for stub in src/lib.rs contract/src/lib.rs failpoint/src/lib.rs kafka-topic-id/src/lib.rs \
      worker/src/lib.rs examples/custom-processor/src/lib.rs test-tools/test-support/src/lib.rs \
      test-tools/fleet-workers/src/lib.rs; do \
      mkdir -p "$(dirname "$stub")" && : > "$stub"; \
    done \
 && for stub in src/main.rs worker/src/main.rs examples/custom-processor/src/main.rs \
      test-tools/local-node/src/main.rs test-tools/fleet-workers/src/main.rs \
      worker/benches/worker.rs worker/benches/join.rs worker/benches/checkpoint_restore.rs \
      worker/benches/checkpoint_overhead.rs worker/benches/wasm.rs \
      benches/failover.rs benches/warmup.rs benches/fleet.rs contract/benches/assignment.rs; do \
      mkdir -p "$(dirname "$stub")" && echo 'fn main() {}' > "$stub"; \
    done
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    cargo build --release --locked --workspace --bin streamkeeper-operator --bin streamkeeper-worker \
      --bin velocity-check
# Our sources. COPY keeps the files' own times, which may be older than the stub build: touch
# them so cargo rebuilds our crates instead of keeping the stubs.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    find src contract/src failpoint/src kafka-topic-id/src worker/src examples/custom-processor/src \
      test-tools/local-node/src test-tools/fleet-workers/src -name '*.rs' -exec touch {} + \
 && cargo build --release --locked --workspace --bin streamkeeper-operator --bin streamkeeper-worker \
      --bin velocity-check \
 && mkdir -p /out \
 && cp target/release/streamkeeper-operator target/release/streamkeeper-worker \
      target/release/velocity-check /out/

# Debian slim of the builder's release, so the libraries match what the binaries were linked
# against. distroless/cc has no libcurl or libsasl2, which librdkafka links.
FROM debian:${DEBIAN_RELEASE}-slim AS runtime
ARG RUNTIME_PACKAGES="ca-certificates libcurl4 libsasl2-2 libssl3 zlib1g libstdc++6 libgcc-s1"
RUN apt-get update \
 && apt-get install -y --no-install-recommends ${RUNTIME_PACKAGES} \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin nonroot
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=1970-01-01T00:00:00Z
LABEL org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://example.invalid/streamkeeper" \
      org.opencontainers.image.vendor="streamkeeper"
# Numeric, so the pods' runAsNonRoot can verify it (a name cannot be checked by the kubelet).
USER 65532:65532

FROM runtime AS operator
LABEL org.opencontainers.image.title="streamkeeper-operator" \
      org.opencontainers.image.description="Kubernetes operator for exactly-once stateful stream jobs"
COPY --from=builder /out/streamkeeper-operator /usr/local/bin/streamkeeper-operator
# The operator writes no files: it runs with a read-only root filesystem and needs no volume.
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/streamkeeper-operator"]
CMD ["run"]

FROM runtime AS worker
LABEL org.opencontainers.image.title="streamkeeper-worker" \
      org.opencontainers.image.description="streamkeeper worker: RocksDB state, Kafka changelog, S3 checkpoints"
COPY --from=builder /out/streamkeeper-worker /usr/local/bin/streamkeeper-worker
# The one writable path: the state volume (the StatefulSet's claim is mounted here). The
# directory exists owned by the worker so a plain `docker run` works too; the root filesystem
# is read-only in the pods.
USER 0:0
RUN mkdir -p /var/lib/streamkeeper && chown 65532:65532 /var/lib/streamkeeper
USER 65532:65532
VOLUME ["/var/lib/streamkeeper"]
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/streamkeeper-worker"]
CMD ["run", "--config", "/etc/streamkeeper/config/worker.yaml"]

# examples/custom-processor: the worker as a user builds it with a processor of their own, which a
# job runs by its spec.image. The operator's pods give only the arguments (run --config ...), so
# this is the worker stage with another ENTRYPOINT: the same state volume, user and port.
FROM runtime AS velocity-check
LABEL org.opencontainers.image.title="streamkeeper-example-velocity-check" \
      org.opencontainers.image.description="streamkeeper worker with the velocity-check example processor"
COPY --from=builder /out/velocity-check /usr/local/bin/velocity-check
USER 0:0
RUN mkdir -p /var/lib/streamkeeper && chown 65532:65532 /var/lib/streamkeeper
USER 65532:65532
VOLUME ["/var/lib/streamkeeper"]
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/velocity-check"]
CMD ["run", "--config", "/etc/streamkeeper/config/worker.yaml"]
