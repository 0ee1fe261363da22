"""The root filesystems scripts/oci_image.py builds with debootstrap and chroot, and their layers.

`debootstrap --variant=minbase <release>` with debian:<release>-slim's minimizing config is made
once per release and architecture and kept; each base stage (the first stage of a target's
chain) runs its RUN steps in a chroot on a copy of it, and that rootfs and its layer are kept by
a hash of the release and the steps. A later stage's RUN steps run on a copy of the base rootfs
and become one more layer, also kept. RUN steps see a mounted /proc (as Docker's do: the JRE's
postinst runs java, which refuses to start without it) and this machine's resolv.conf. Needs
root for anything not cached.
"""

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import time

from oci_common import BuildError, log
from oci_layers import snapshot, tree_entries, walk, write_layer

# Bump when the rootfs recipe below changes, so cached rootfs built the old way are not reused.
RECIPE = 2
# What debian:<release>-slim carries beyond debootstrap (debuerreotype's minimizing config and
# slimify list): apt keeps no .debs or caches, dpkg skips docs, man pages and locales.
APT_CONFIG = {
    "docker-clean": 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb '
    '/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n'
    'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb '
    '/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\n'
    'Dir::Cache::pkgcache "";\nDir::Cache::srcpkgcache "";\n',
    "docker-autoremove-suggests": 'Apt::AutoRemove::SuggestsImportant "false";\n',
    "docker-gzip-indexes": 'Acquire::GzipIndexes "true";\n',
    "docker-no-languages": 'Acquire::Languages "none";\n',
}
SLIM_EXCLUDES = ["/usr/share/doc/*", "/usr/share/groff/*", "/usr/share/info/*",
                 "/usr/share/linda/*", "/usr/share/lintian/overrides/*",
                 "/usr/share/locale/*", "/usr/share/man/*"]
SLIM_INCLUDES = ["/usr/share/doc/*/copyright"]


def run(argv, log_file, what):
    with open(log_file, "ab") as out:
        status = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out).returncode
    if status != 0:
        with open(log_file, "rb") as out:
            tail = out.read()[-3000:].decode(errors="replace")
        raise BuildError(f"{what} failed (exit {status}); end of {log_file}:\n{tail}")


def lookup(rootfs, file, key, column):
    """A column of the image's passwd or group entry named (or numbered) key, or None."""
    with open(os.path.join(rootfs, "etc", file), encoding="utf-8") as entries:
        for line in entries:
            fields = line.rstrip("\n").split(":")
            if fields[0] == key or fields[2] == key:
                return fields[column]
    return None


def numeric_user(rootfs, user):
    """USER (or COPY --chown) as uid:gid, names and a missing group looked up in the image's
    passwd and group."""
    name, _, group = user.partition(":")
    uid = name if name.isdigit() else lookup(rootfs, "passwd", name, 2)
    if uid is None:
        raise BuildError(f"USER {user}: no such user in the image")
    gid = group if group.isdigit() else lookup(rootfs, "group", group, 2) if group else (
        lookup(rootfs, "passwd", uid, 3) or "0")
    if gid is None:
        raise BuildError(f"USER {user}: no such group in the image")
    return f"{uid}:{gid}"


@contextlib.contextmanager
def mounted_proc(rootfs):
    """/proc inside the rootfs for the duration of its RUN steps, unmounted even on failure."""
    proc = os.path.join(rootfs, "proc")
    os.makedirs(proc, exist_ok=True)
    subprocess.run(["mount", "-t", "proc", "proc", proc], check=True)
    try:
        yield
    finally:
        if subprocess.run(["umount", proc]).returncode != 0:
            raise BuildError(f"umount {proc} failed: a RUN step left a process running in it?")


def run_steps(rootfs, steps, log_file):
    """The stage's RUN steps in a chroot, each as its USER, with its ENV and ARGs only. They
    resolve names with this machine's resolv.conf, as docker's RUN does with the engine's; the
    image's own file is put back as it was, so it is no change of the stage."""
    if not steps:
        return
    resolv = os.path.join(rootfs, "etc/resolv.conf")
    if os.path.islink(resolv):
        raise BuildError(f"{resolv} is a symbolic link: writing it would write this machine's")
    saved = None
    if os.path.exists(resolv):
        with open(resolv, "rb") as f:
            saved = (f.read(), os.stat(resolv))
    shutil.copyfile("/etc/resolv.conf", resolv)
    try:
        with mounted_proc(rootfs):
            for step in steps:
                user = numeric_user(rootfs, step["user"])
                env = {"HOME": "/root" if user.startswith("0:") else "/",
                       "DEBIAN_FRONTEND": "noninteractive", **step["env"]}
                what = f"RUN {' '.join(step['run'])}"
                log(what)
                run(["env", "-i", *[f"{k}={v}" for k, v in env.items()],
                     "chroot", f"--userspec={user}", rootfs, *step["run"]], log_file, what)
    finally:
        if saved is None:
            os.remove(resolv)
        else:
            with open(resolv, "wb") as f:
                f.write(saved[0])
            os.utime(resolv, ns=(saved[1].st_atime_ns, saved[1].st_mtime_ns))


def slim(rootfs, release):
    """debian:<release>-slim's config: its apt sources, no caches, no docs beyond copyright."""
    with open(os.path.join(rootfs, "etc/apt/sources.list.d/debian.sources"), "w",
              encoding="utf-8") as sources:
        sources.write(f"Types: deb\nURIs: http://deb.debian.org/debian\n"
                      f"Suites: {release} {release}-updates\nComponents: main\n"
                      f"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
                      f"Types: deb\nURIs: http://deb.debian.org/debian-security\n"
                      f"Suites: {release}-security\nComponents: main\n"
                      f"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n")
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(rootfs, "etc/apt/sources.list"))
    for name, text in APT_CONFIG.items():
        with open(os.path.join(rootfs, "etc/apt/apt.conf.d", name), "w", encoding="utf-8") as f:
            f.write(text)
    with open(os.path.join(rootfs, "etc/dpkg/dpkg.cfg.d/docker"), "w", encoding="utf-8") as f:
        f.writelines([f"path-exclude {p}\n" for p in SLIM_EXCLUDES] +
                     [f"path-include {p}\n" for p in SLIM_INCLUDES])
    keep = [re.compile(re.escape(p).replace(r"\*", "[^/]*") + "$") for p in SLIM_INCLUDES]
    for pattern in SLIM_EXCLUDES:
        top = os.path.join(rootfs, os.path.dirname(pattern).lstrip("/"))
        for dirpath, _, filenames in os.walk(top, topdown=False):
            for name in filenames:
                path = os.path.join(dirpath, name)
                if not any(k.match("/" + os.path.relpath(path, rootfs)) for k in keep):
                    os.remove(path)
            if dirpath != top and not os.listdir(dirpath):
                os.rmdir(dirpath)


def scrub(rootfs):
    """Drops what a build leaves that no image should carry: logs, caches, the host's names."""
    for pattern_dir, keep_dirs in (("var/log", True), ("var/cache/apt", True),
                                   ("var/lib/apt/lists", True), ("tmp", False)):
        top = os.path.join(rootfs, pattern_dir)
        for dirpath, dirnames, filenames in os.walk(top, topdown=False):
            for name in filenames:
                os.remove(os.path.join(dirpath, name))
            if not keep_dirs:
                for name in dirnames:
                    os.rmdir(os.path.join(dirpath, name))
    # ldconfig's aux-cache records inodes and ctimes: it differs on every build, and is rebuilt.
    for name in ("var/cache/debconf/config.dat-old", "var/cache/debconf/templates.dat-old",
                 "var/lib/dpkg/status-old", "var/lib/dpkg/diversions-old",
                 "var/cache/ldconfig/aux-cache"):
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(rootfs, name))
    for name in ("etc/hostname", "etc/resolv.conf"):
        path = os.path.join(rootfs, name)
        if os.path.lexists(path):
            os.remove(path)
            open(path, "w", encoding="utf-8").close()


def unmount_below(path):
    """Unmounts what a killed build left mounted in a stale build folder of ours."""
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts]
    for point in sorted((p for p in points if p.startswith(path + "/")), reverse=True):
        subprocess.run(["umount", point], check=True)


def fresh_folder(path):
    """An empty folder at path, after unmounting and removing what a killed build left there."""
    if os.path.exists(path):
        unmount_below(path)
        shutil.rmtree(path)
    os.makedirs(path)


def debian_rootfs(cache, release, arch, mirror):
    """debootstrap minbase of the release with the slim config, made once and kept: every base
    stage of that release starts from a copy of it."""
    folder = os.path.join(cache, f"debian-{release}-{arch}-r{RECIPE}")
    if os.path.isdir(os.path.join(folder, "rootfs")):
        return os.path.join(folder, "rootfs")
    if os.geteuid() != 0:
        raise BuildError("building the base rootfs needs root (debootstrap and chroot)")
    building = f"{folder}.building"
    fresh_folder(building)
    rootfs, log_file = os.path.join(building, "rootfs"), os.path.join(building, "build.log")
    started = time.monotonic()
    log(f"debootstrap --variant=minbase {release} ({mirror}); log: {log_file}")
    run(["debootstrap", "--variant=minbase", f"--arch={arch}", release, rootfs, mirror],
        log_file, "debootstrap")
    slim(rootfs, release)
    os.rename(building, folder)
    log(f"debootstrap done after {time.monotonic() - started:.0f} s")
    return os.path.join(folder, "rootfs")


def base_layer(cache, plan_, arch, mirror, level):
    """The base stage's rootfs folder, its key and its layer, built once per release, RUN steps
    and architecture."""
    key = hashlib.sha256(json.dumps([RECIPE, plan_["release"], arch, plan_["base_steps"]],
                                    sort_keys=True).encode()).hexdigest()[:16]
    folder = os.path.join(cache, f"runtime-{key}")
    if os.path.exists(os.path.join(folder, "layer.json")):
        with open(os.path.join(folder, "layer.json"), encoding="utf-8") as f:
            return folder, key, json.load(f)
    if os.geteuid() != 0:
        raise BuildError("building the base rootfs needs root (debootstrap and chroot)")
    debian = debian_rootfs(cache, plan_["release"], arch, mirror)
    building = f"{folder}.building"
    fresh_folder(building)
    rootfs, log_file = os.path.join(building, "rootfs"), os.path.join(building, "build.log")
    started = time.monotonic()
    run(["cp", "-a", "--reflink=auto", debian, rootfs], log_file, "copying the debootstrap rootfs")
    run_steps(rootfs, plan_["base_steps"], log_file)
    scrub(rootfs)
    log(f"rootfs ready after {time.monotonic() - started:.0f} s; writing its layer")
    layer = write_layer(os.path.join(building, "layer.tar.gz"),
                        tree_entries(rootfs, list(walk(rootfs))), level)
    with open(os.path.join(building, "layer.json"), "w", encoding="utf-8") as f:
        json.dump(layer, f)
    os.rename(building, folder)
    log(f"base layer {layer['digest'][:19]} ({layer['size'] >> 20} MiB) after "
        f"{time.monotonic() - started:.0f} s")
    return folder, key, layer


def stage_layer(folder, steps, level):
    """The later stages' RUN/WORKDIR changes on top of the base rootfs, or None without any:
    (layer, blob, {folder path: (mode, uid, gid)} of the folders they changed)."""
    if not steps:
        return None
    key = hashlib.sha256(json.dumps(steps, sort_keys=True).encode()).hexdigest()[:16]
    cached, blob = (os.path.join(folder, f"stage-{key}.{ext}") for ext in ("json", "tar.gz"))
    if os.path.exists(cached):
        with open(cached, encoding="utf-8") as f:
            layer = json.load(f)
        return layer, blob, {p: tuple(v) for p, v in layer.pop("folders", {}).items()}
    if os.geteuid() != 0:
        raise BuildError("running the stage's RUN steps needs root (chroot)")
    base, scratch = os.path.join(folder, "rootfs"), os.path.join(folder, f"scratch-{key}")
    if os.path.exists(scratch):
        unmount_below(scratch)
        shutil.rmtree(scratch)
    try:
        run(["cp", "-a", "--reflink=auto", base, scratch], os.path.join(folder, "build.log"),
            "copying the base rootfs")
        before = snapshot(base)
        run_steps(scratch, steps, os.path.join(folder, "build.log"))
        after = snapshot(scratch)
        changed = [p for p, s in after.items() if before.get(p) != s]
        deleted = [p for p in before if p not in after
                   and (os.path.dirname(p) in after or not os.path.dirname(p))]
        layer = write_layer(blob, tree_entries(scratch, changed, deleted), level)
        folders = {p: (after[p][0] & 0o7777, after[p][1], after[p][2]) for p in changed
                   if os.path.isdir(os.path.join(scratch, p))
                   and not os.path.islink(os.path.join(scratch, p))}
    finally:
        unmount_below(scratch)  # raises rather than remove files under a /proc left mounted
        shutil.rmtree(scratch, ignore_errors=True)
    with open(cached, "w", encoding="utf-8") as f:
        json.dump({**layer, "folders": folders}, f)
    return layer, blob, folders
