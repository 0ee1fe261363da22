#!/usr/bin/env python3
"""Builds one target of a Dockerfile as an OCI image layout archive, without a Docker engine.

scripts/oci-image.sh (our operator, worker and example worker build) and tests/e2e/images.sh (the
stand-ins for the e2e scenario's Kafka and SeaweedFS) call this; they pick names, paths and the
folders below.
The Dockerfile is the only recipe (scripts/oci_dockerfile.py reads it): the target's chain of
stages must start FROM debian:<release>-slim, which becomes a debootstrap'd rootfs with the slim
image's minimizing config on which the first stage's own RUN steps run in a chroot, with its
ARGs in their environment as `docker build` gives them (scripts/oci_rootfs.py). Later stages'
RUN steps add one layer; each COPY adds one more, above all RUN layers:
  - `COPY <src>... <dest>` reads the build context (--context);
  - `COPY --from=<stage> <src>... <dest>` reads the folder that stands for that stage's path,
    given as --stage-dir <stage>:<path>=<folder> (e.g. builder:/out=target/debug: the binaries
    cargo built here); the other stages of the Dockerfile are never built.
USER, ENV, LABEL, EXPOSE, VOLUME, WORKDIR, ENTRYPOINT, CMD and STOPSIGNAL become the image
config. Anything else stops the build rather than being ignored. Layers are deterministic and
cached under --cache (scripts/oci_layers.py), so an unchanged rebuild takes seconds.
Standard library only (python3 3.11).
"""

import argparse
import fcntl
import os
import re
import stat
import sys

from oci_common import BuildError, log
from oci_dockerfile import plan
from oci_layers import copy_layer, copy_sources
from oci_layout import oci_arch, write_archive
from oci_rootfs import base_layer, numeric_user, stage_layer


def stage_dir(text):
    """--stage-dir <stage>:<path>=<folder> as (stage, path, folder)."""
    match = re.fullmatch(r"([\w.-]+):(/[^=]*)=(.+)", text)
    if not match:
        raise BuildError(f"--stage-dir {text}: expected <stage>:<absolute path>=<folder>")
    return match.group(1), os.path.normpath(match.group(2)), os.path.abspath(match.group(3))


def folder_metadata(rootfs, stage_folders):
    """(path) -> (mode, uid, gid) of a folder the image has before its COPY layers, or None.
    A symbolic link on the way (bookworm's /bin, /lib, /sbin) stops the build: Docker would
    copy through it, and a folder entry in the layer would replace the link."""
    def metadata(path):
        if path in stage_folders:
            return stage_folders[path]
        full = os.path.join(rootfs, path)
        if os.path.islink(full):
            raise BuildError(f"a COPY writes below /{path}, a symbolic link in the image; "
                             "copy to the path it points to")
        if not os.path.isdir(full):
            return None
        st = os.lstat(full)
        return stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    return metadata


def build(options):
    build_args = dict(arg.split("=", 1) for arg in options.build_arg)
    stage_dirs = [stage_dir(text) for text in options.stage_dir]
    with open(options.dockerfile, encoding="utf-8") as f:
        plan_ = plan(f.read(), options.target, build_args)
    arch = oci_arch()
    # The name without its tag: a new version reuses (and replaces) the same cached COPY layers.
    slug = re.sub(r"[^\w.-]+", "_", re.sub(r":[^:/]*$", "", options.name))
    os.makedirs(options.cache, exist_ok=True)
    with open(os.path.join(options.cache, ".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per cache
        folder, key, base = base_layer(options.cache, plan_, arch, options.mirror, 6)
        rootfs = os.path.join(folder, "rootfs")
        layers = [(base, os.path.join(folder, "layer.tar.gz"),
                   f"debootstrap --variant=minbase {plan_['release']} + base stage RUN "
                   f"(runtime-{key})")]
        stage_folders = {}
        stage = stage_layer(folder, plan_["steps"], 6)
        if stage:
            layer, blob, stage_folders = stage
            layers.append((layer, blob, "; ".join(" ".join(s["run"]) for s in plan_["steps"])))
        metadata = folder_metadata(rootfs, stage_folders)
        for index, copy_ in enumerate(plan_["copies"]):
            pairs = copy_sources(copy_, options.context, stage_dirs)
            owner = (0, 0)
            if copy_["chown"]:
                owner = tuple(int(i) for i in numeric_user(rootfs, copy_["chown"]).split(":"))
            # Level 1: COPY layers change with every code change (and jars, binaries compress
            # little further); the base layers, built once, get level 6.
            layer, blob = copy_layer(options.cache, f"{slug}-{index}", pairs, owner, metadata, 1)
            layers.append((layer, blob, copy_["line"]))
        write_archive(options.out, options.name, arch, plan_, layers, options.created)
    log(f"{options.name}: {options.out} ({os.path.getsize(options.out) >> 20} MiB)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dockerfile", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--name", required=True, help="image reference, e.g. streamkeeper/worker:0.1.0")
    parser.add_argument("--context", required=True, help="the build context a plain COPY reads")
    parser.add_argument("--stage-dir", action="append", default=[],
                        help="<stage>:<path>=<folder>: what COPY --from=<stage> <path>... reads")
    parser.add_argument("--cache", required=True, help="folder of the cached rootfs and layers")
    parser.add_argument("--out", required=True, help="the OCI archive to write")
    parser.add_argument("--created", required=True, help="RFC 3339 time of the image config")
    parser.add_argument("--mirror", default="http://deb.debian.org/debian")
    parser.add_argument("--build-arg", action="append", default=[], help="NAME=value")
    options = parser.parse_args()
    try:
        build(options)
    except BuildError as error:
        print(f"[oci_image.py] ERROR: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
