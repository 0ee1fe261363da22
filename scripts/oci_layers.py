"""Layer tarballs for scripts/oci_image.py: a rootfs (or the part of it a step changed) and the
files one COPY instruction adds, as deterministic gzipped tars with their digests.

Deterministic: entries in sorted order, mtime 0, owners and modes as on disk (a COPY's files
root-owned unless --chown, modes kept, as Docker does), no user or group names, gzip without
a name or time. This module reads files and writes layer blobs; it runs nothing.
"""

import gzip
import hashlib
import json
import os
import stat
import tarfile

from oci_common import BuildError

LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
# Kept out of every layer: the container runtime mounts these.
MOUNTED = ("dev", "proc", "sys")


class HashingWriter:
    """Passes writes on, hashing and counting them (tarfile and gzip need only write())."""

    def __init__(self, sink):
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def write(self, data):
        self.sha.update(data)
        self.size += len(data)
        return self.sink.write(data)

    def flush(self):
        self.sink.flush()


def write_layer(path, entries, level):
    """Writes entries ((TarInfo, source path or None) in order) as a gzipped tar at path and
    returns its descriptor: digest and size of the blob, diff_id of the tar."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as raw:
        compressed = HashingWriter(raw)
        with gzip.GzipFile(filename="", mode="wb", fileobj=compressed, compresslevel=level,
                           mtime=0) as gz:
            plain = HashingWriter(gz)
            with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:
                for info, source in entries:
                    if source is None:
                        tar.addfile(info)
                    else:
                        with open(source, "rb") as data:
                            tar.addfile(info, data)
    os.replace(tmp, path)
    return {"mediaType": LAYER, "digest": f"sha256:{compressed.sha.hexdigest()}",
            "size": compressed.size, "diff_id": f"sha256:{plain.sha.hexdigest()}"}


def tar_info(name, st, linkname=""):
    """The entry for a file as it is on disk, with the fixed mtime and no owner names."""
    info = tarfile.TarInfo(name)
    info.mode, info.uid, info.gid = stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid
    info.mtime, info.uname, info.gname = 0, "", ""
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, linkname
    elif stat.S_ISREG(st.st_mode):
        info.type, info.size = tarfile.REGTYPE, st.st_size
    elif stat.S_ISFIFO(st.st_mode):
        info.type = tarfile.FIFOTYPE
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        info.type = tarfile.CHRTYPE if stat.S_ISCHR(st.st_mode) else tarfile.BLKTYPE
        info.devmajor, info.devminor = os.major(st.st_rdev), os.minor(st.st_rdev)
    else:
        return None  # sockets: nothing to carry
    return info


def walk(root, relative="", skip=MOUNTED):
    """Every path under root (relative, sorted depth-first), without the contents of the folders
    in skip (by default a rootfs's mounted trees)."""
    for name in sorted(os.listdir(os.path.join(root, relative))):
        path = os.path.join(relative, name)
        yield path
        full = os.path.join(root, path)
        if os.path.isdir(full) and not os.path.islink(full) and path not in skip:
            yield from walk(root, path, skip)


def tree_entries(root, paths, whiteouts=()):
    """Tar entries for the given paths of root (hard links kept), plus whiteouts for deletions."""
    first_of = {}
    entries = []
    for path in sorted(set(paths) | {os.path.join(os.path.dirname(w), ".wh." +
                                                  os.path.basename(w)) for w in whiteouts}):
        full = os.path.join(root, path)
        if os.path.basename(path).startswith(".wh.") and not os.path.lexists(full):
            info = tarfile.TarInfo(path)
            info.mode, info.mtime = 0o644, 0
            entries.append((info, None))
            continue
        st = os.lstat(full)
        info = tar_info(path, st, os.readlink(full) if stat.S_ISLNK(st.st_mode) else "")
        if info is None:
            continue
        if info.type == tarfile.REGTYPE and st.st_nlink > 1:
            key = (st.st_dev, st.st_ino)
            if key in first_of:
                info.type, info.size, info.linkname = tarfile.LNKTYPE, 0, first_of[key]
                entries.append((info, None))
                continue
            first_of[key] = path
        entries.append((info, full if info.type == tarfile.REGTYPE else None))
    return entries


def snapshot(root):
    """What a diff compares: kind, mode, owner, size, mtime and link target of every path.
    Not a folder's size: on ext4 it depends on how the folder was filled, so `cp -a` changes it."""
    result = {}
    for path in walk(root):
        st = os.lstat(os.path.join(root, path))
        link = os.readlink(os.path.join(root, path)) if stat.S_ISLNK(st.st_mode) else ""
        folder = stat.S_ISDIR(st.st_mode)
        result[path] = (st.st_mode, st.st_uid, st.st_gid, 0 if folder else st.st_size,
                        st.st_mtime_ns, st.st_rdev, link)
    return result


# ---------------------------------------------------------------- COPY


def copy_sources(copy_, context, stage_dirs):
    """The host files one COPY reads, as (host path, image path) pairs, folders walked.
    A plain COPY reads the build context; COPY --from=<stage> reads the folder standing for
    that stage's path (`--stage-dir stage:/path=folder`), never the stage's own build."""
    pairs = []
    for source in copy_["sources"]:
        if copy_["from"] is None:
            host = os.path.normpath(os.path.join(context, source.lstrip("/")))
            if os.path.relpath(host, context).startswith(".."):
                raise BuildError(f"{copy_['line']}: {source} is outside the build context")
        else:
            host = stage_path(copy_, source, stage_dirs)
        if not os.path.lexists(host):
            raise BuildError(f"{copy_['line']}: {host} is missing")
        if os.path.isdir(host) and not os.path.islink(host):
            pairs.extend((os.path.join(host, p), os.path.join(copy_["dest"], p))
                         for p in walk(host, skip=()))
        elif copy_["dest_is_dir"]:
            pairs.append((host, os.path.join(copy_["dest"], os.path.basename(host))))
        else:
            pairs.append((host, copy_["dest"]))
    return pairs


def stage_path(copy_, source, stage_dirs):
    """Where on this machine the stage's `source` is, from the --stage-dir that covers it."""
    source = os.path.normpath(source)
    for stage, image_root, folder in stage_dirs:
        if stage == copy_["from"] and (source == image_root or
                                       source.startswith(image_root.rstrip("/") + "/")):
            return os.path.join(folder, os.path.relpath(source, image_root))
    raise BuildError(f"{copy_['line']}: no --stage-dir {copy_['from']}:<path>=<folder> covers "
                     f"{source}")


def copy_entries(pairs, owner, image_dirs):
    """Tar entries for the copied files and the folders above them. A folder the image already
    has keeps its mode and owner (image_dirs(path) -> (mode, uid, gid) or None), as Docker keeps
    it; a new one is 0755. Copied files and folders keep their modes; they and the new folders
    belong to root, or to --chown's owner (Docker: "all new files and directories")."""
    uid, gid = owner
    entries, seen = {}, set()
    for host, image in pairs:
        image = image.lstrip("/")
        parent = os.path.dirname(image)
        while parent and parent not in seen:
            seen.add(parent)
            mode_uid_gid = image_dirs(parent) or (0o755, uid, gid)
            info = tarfile.TarInfo(parent)
            info.type, info.mtime = tarfile.DIRTYPE, 0
            info.mode, info.uid, info.gid = mode_uid_gid
            entries.setdefault(parent, (info, None))
            parent = os.path.dirname(parent)
        st = os.lstat(host)
        info = tar_info(image, st, os.readlink(host) if stat.S_ISLNK(st.st_mode) else "")
        if info is None:
            continue
        info.uid, info.gid = uid, gid
        entries[image] = (info, host if info.type == tarfile.REGTYPE else None)
    return [entries[path] for path in sorted(entries)]


def copy_layer(cache, slug, pairs, owner, image_dirs, level):
    """The layer of one COPY, kept per slug and rebuilt only when an entry (its name, kind, mode,
    owner, size, link) or a source file's mtime or inode changes: an unchanged rebuild is fast,
    and a cache holds one layer per COPY, not one per build."""
    entries = copy_entries(pairs, owner, image_dirs)
    described = [(i.name, i.type.decode(), i.mode, i.uid, i.gid, i.size, i.linkname,
                  os.stat(source).st_mtime_ns if source else 0, os.stat(source).st_ino if source else 0)
                 for i, source in entries]
    key = hashlib.sha256(json.dumps([described, level]).encode()).hexdigest()
    blob, cached = (os.path.join(cache, f"copy-{slug}.{ext}") for ext in ("tar.gz", "json"))
    if os.path.exists(cached):
        with open(cached, encoding="utf-8") as f:
            layer = json.load(f)
        if layer.pop("key") == key and os.path.exists(blob):
            return layer, blob
    layer = write_layer(blob, entries, level)
    with open(cached, "w", encoding="utf-8") as f:
        json.dump({**layer, "key": key}, f)
    return layer, blob
