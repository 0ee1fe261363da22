#!/usr/bin/env python3
"""Writes the node's pause image, one static binary as its only layer, as an OCI image layout
archive that `ctr images import` takes:  pause_image.py <binary> <reference> <out.tar>

Deterministic (fixed times, owners and gzip header), so the same binary gives the same image."""

import gzip
import hashlib
import io
import json
import sys
import tarfile


def blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest(), data


def layer(binary):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        with open(binary, "rb") as source:
            content = source.read()
        info = tarfile.TarInfo("pause")
        info.size, info.mode, info.mtime = len(content), 0o755, 0
        tar.addfile(info, io.BytesIO(content))
    diff_id = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
    return diff_id, gzip.compress(raw.getvalue(), mtime=0)


def main(binary, reference, out):
    diff_id, compressed = layer(binary)
    layer_digest, _ = blob(compressed)
    config_digest, config = blob(json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }, sort_keys=True).encode())
    manifest_digest, manifest = blob(json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": layer_digest, "size": len(compressed)}],
    }, sort_keys=True).encode())
    index = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": manifest_digest, "size": len(manifest),
                       "annotations": {"io.containerd.image.name": reference,
                                       "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1]}}],
    }, sort_keys=True).encode()
    with tarfile.open(out, mode="w") as tar:
        def add(name, data):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
        add("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        add("index.json", index)
        for digest, data in ((layer_digest, compressed), (config_digest, config), (manifest_digest, manifest)):
            add("blobs/sha256/" + digest.split(":", 1)[1], data)


if __name__ == "__main__":
    main(*sys.argv[1:])
