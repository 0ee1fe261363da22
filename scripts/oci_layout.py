"""The OCI image layout archive scripts/oci_image.py writes: oci-layout, index.json naming the
image (as containerd's `ctr images import` and `kind load image-archive` read it), the manifest,
the config and the layer blobs, in one tar with fixed times. Writes only the archive."""

import io
import json
import os
import platform
import tarfile

from oci_common import BuildError, sha256

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"


def full_name(name):
    """The name containerd and the kubelet use for a Docker-style reference."""
    first = name.split("/")[0]
    if "/" in name and ("." in first or ":" in first or first == "localhost"):
        return name
    return f"docker.io/{name}" if "/" in name else f"docker.io/library/{name}"


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_archive(out, name, arch, plan_, layers, created):
    """oci-layout, index.json (naming the image), the manifest, config and layer blobs."""
    config = plan_["config"]
    image_config = {k: v for k, v in {
        "User": config["User"], "Env": [f"{k}={v}" for k, v in config["Env"].items()],
        "Entrypoint": config["Entrypoint"], "Cmd": config["Cmd"],
        "ExposedPorts": config["ExposedPorts"], "Volumes": config["Volumes"],
        "WorkingDir": config["WorkingDir"], "Labels": config["Labels"],
        "StopSignal": config.get("StopSignal")}.items() if v not in (None, "", {})}
    config_blob = canonical({
        "created": created, "architecture": arch, "os": "linux", "config": image_config,
        "rootfs": {"type": "layers", "diff_ids": [layer["diff_id"] for layer, _, _ in layers]},
        "history": [{"created": created, "created_by": what} for _, _, what in layers]})
    config_desc = {"mediaType": CONFIG, "digest": sha256(config_blob), "size": len(config_blob)}
    manifest_blob = canonical({
        "schemaVersion": 2, "mediaType": MANIFEST, "config": config_desc,
        "layers": [{k: layer[k] for k in ("mediaType", "digest", "size")}
                   for layer, _, _ in layers]})
    index_blob = canonical({"schemaVersion": 2, "mediaType": INDEX, "manifests": [{
        "mediaType": MANIFEST, "digest": sha256(manifest_blob), "size": len(manifest_blob),
        "platform": {"architecture": arch, "os": "linux"},
        "annotations": {"io.containerd.image.name": full_name(name),
                        "org.opencontainers.image.ref.name": name}}]})
    blobs = {sha256(config_blob): config_blob, sha256(manifest_blob): manifest_blob}
    files = {layer["digest"]: path for layer, path, _ in layers}
    tmp = f"{out}.tmp{os.getpid()}"
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        def add(path, data=None, source=None):
            info = tarfile.TarInfo(path)
            info.mtime, info.mode = 0, 0o755 if path.endswith("/") else 0o644
            if path.endswith("/"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif source:
                info.size = os.path.getsize(source)
                with open(source, "rb") as f:
                    tar.addfile(info, f)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        add("blobs/")
        add("blobs/sha256/")
        for digest in sorted(set(blobs) | set(files)):
            add(f"blobs/sha256/{digest[7:]}", blobs.get(digest), files.get(digest))
        add("index.json", index_blob)
        add("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))
    os.replace(tmp, out)



def oci_arch():
    machine = platform.machine()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine)
    if arch is None:
        raise BuildError(f"no Debian/OCI architecture known for {machine}")
    return arch
