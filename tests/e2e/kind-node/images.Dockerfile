# The images a kind node runs besides our own, built here rather than pulled (registry.k8s.io,
# ghcr.io and docker.io do not answer on this machine, nor on an air-gapped one):
# tests/e2e/kind-node-image.sh builds one target each, from a context whose bin/ holds the
# binaries it built from the Go module proxy, tags them as kubeadm and the node's manifests name
# them, and imports them into the node image's containerd.
#
# Upstream builds the Kubernetes images on distroless; the static Go binaries here need nothing
# from a base, so they are FROM scratch. kube-proxy and flanneld run iptables, and the flannel CNI
# installer and local-path helper run cp and sh: those start from debian:<release>-slim, whose
# iptables is Debian's (nft backend, as the node's entrypoint selects on this kernel).

ARG DEBIAN_RELEASE=bookworm

FROM scratch AS static
ENV PATH=/usr/local/bin:/usr/bin:/bin

# kubeadm's static pods and the kube-proxy DaemonSet give the command (kube-apiserver, ...), found
# on the PATH.
FROM static AS kube-apiserver
COPY bin/kube-apiserver /usr/local/bin/kube-apiserver

FROM static AS kube-controller-manager
COPY bin/kube-controller-manager /usr/local/bin/kube-controller-manager

FROM static AS kube-scheduler
COPY bin/kube-scheduler /usr/local/bin/kube-scheduler

FROM static AS etcd
COPY bin/etcd /usr/local/bin/etcd

# kubeadm's CoreDNS Deployment gives only the arguments: the entrypoint is upstream's /coredns.
FROM static AS coredns
COPY bin/coredns /coredns
USER 65532:65532
ENTRYPOINT ["/coredns"]

FROM static AS pause
COPY bin/pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]

FROM static AS local-path-provisioner
COPY bin/local-path-provisioner /usr/local/bin/local-path-provisioner
ENTRYPOINT ["local-path-provisioner"]

FROM debian:${DEBIAN_RELEASE}-slim AS debian-iptables
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables conntrack ipset kmod iproute2 ca-certificates \
 && rm -rf /var/lib/apt/lists/*

FROM debian-iptables AS kube-proxy
COPY bin/kube-proxy /usr/local/bin/kube-proxy

# As upstream's image: flanneld and install-conf in /opt/bin.
FROM debian-iptables AS flannel
COPY bin/flanneld bin/install-conf /opt/bin/
ENTRYPOINT ["/opt/bin/flanneld"]

# The flannel manifest's first init container copies /flannel into the node's /opt/cni/bin.
FROM debian:${DEBIAN_RELEASE}-slim AS flannel-cni-plugin
COPY bin/flannel /flannel

# local-path-provisioner's helper pods run the setup and teardown scripts (mkdir, rm) with sh.
FROM debian:${DEBIAN_RELEASE}-slim AS local-path-helper
