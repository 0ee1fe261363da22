#!/usr/bin/env python3
"""Builds one target of ./Dockerfile as an OCI image layout archive, without a Docker engine.

scripts/oci-image.sh calls this (it installs debootstrap and picks names and paths). The
Dockerfile is the only recipe: the stage that starts FROM debian:<release>-slim becomes a
`debootstrap --variant=minbase <release>` rootfs with the slim image's minimizing config, then
that stage's own RUN steps run in a chroot, with its ARGs in their environment as `docker build`
gives them (so RUNTIME_PACKAGES and the nonroot user come from the Dockerfile, never a copy).
That rootfs and its layer are cached by a hash of the release and the stage's RUN steps and
ARGs. A stage built FROM it adds at most two layers: one for its RUN/WORKDIR steps (run in a
chroot on a copy of the base, cached the same way) and one for the binaries it COPYs from the
builder stage, taken from --bin-dir; only that last one changes with the code. USER, ENV,
LABEL, EXPOSE, VOLUME, WORKDIR, ENTRYPOINT, CMD and STOPSIGNAL become the image config.
Anything else in those stages (ADD, SHELL, ...) stops the build rather than being ignored.

Layers are deterministic: entries in sorted order, mtime 0, owners and modes as in the rootfs
(the binaries root-owned, 0755), no user or group names, gzip without a name or time.
Standard library only (python3 3.11).
"""

import argparse
import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import os
import platform
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tarfile
import time

# Bump when the rootfs recipe below changes, so cached rootfs built the old way are not reused.
RECIPE = 2
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Kept out of every layer: the container runtime mounts these.
MOUNTED = ("dev", "proc", "sys")
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


class BuildError(Exception):
    """A reason the image cannot be built, printed as the script's one-line error."""


def log(message):
    print(f"[oci_image.py] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- Dockerfile


def logical_lines(text):
    """Instructions with continuation lines joined; comments and blank lines dropped."""
    lines, current = [], ""
    for line in text.splitlines():
        trimmed = line.strip()
        if trimmed.startswith("#") or (not trimmed and not current):
            continue
        if trimmed.endswith("\\"):
            current += trimmed[:-1] + " "
        else:
            lines.append((current + trimmed).strip())
            current = ""
    return [line for line in lines if line]


def parse_dockerfile(text):
    """(global ARG lines, [stage]); a stage is {name, base, instructions: [(OP, rest)]}."""
    global_args, stages = [], []
    for line in logical_lines(text):
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "FROM":
            words = rest.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else ""
            stages.append({"name": name, "base": words[0], "instructions": []})
        elif stages:
            stages[-1]["instructions"].append((op, rest))
        elif op == "ARG":
            global_args.append(rest)
        else:
            raise BuildError(f"{op} before the first FROM")
    return global_args, stages


VARIABLE = re.compile(r"\$(?:\{(\w+)(?::([-+])([^}]*))?\}|(\w+))")


def expand(text, env):
    """Dockerfile variable substitution: $X, ${X}, ${X:-default}, ${X:+alternative}."""
    def replace(match):
        name = match.group(1) or match.group(4)
        value = env.get(name, "")
        if match.group(2) == "-":
            return value or match.group(3)
        if match.group(2) == "+":
            return match.group(3) if value else ""
        return value
    return VARIABLE.sub(replace, text)


def declare_arg(rest, args, build_args, inherited):
    """`ARG NAME[=default]`: the build argument, else the default, else the global value."""
    (word,) = shlex.split(rest)
    name, has_default, default = word.partition("=")
    if name in build_args:
        args[name] = build_args[name]
    elif has_default:
        args[name] = expand(default, args)
    elif name in inherited:
        args[name] = inherited[name]


def pairs(rest, env, what):
    """KEY=value words of LABEL and ENV (the legacy `ENV KEY value` form too)."""
    words = shlex.split(rest)
    if what == "ENV" and words and "=" not in words[0]:
        return [(words[0], expand(" ".join(words[1:]), env))]
    result = []
    for word in words:
        key, has_value, value = word.partition("=")
        if not has_value:
            raise BuildError(f"{what} {rest}: expected KEY=value")
        result.append((expand(key, env), expand(value, env)))
    return result


def exec_form(rest):
    """ENTRYPOINT/CMD/RUN: the JSON array form, or the shell form as /bin/sh -c."""
    if rest.startswith("["):
        return json.loads(rest)
    return ["/bin/sh", "-c", rest]


def plan(dockerfile_text, target, build_args):
    """What to build for `target`: the base stage's release and steps, the target's steps and
    copies, and the image config, all read from the Dockerfile."""
    global_lines, stages = parse_dockerfile(dockerfile_text)
    global_args = {}
    for rest in global_lines:
        declare_arg(rest, global_args, build_args, {})
    by_name = {s["name"]: s for s in stages if s["name"]}
    chain, name = [], target
    while name in by_name:
        if any(s is by_name[name] for s in chain):
            raise BuildError(f"stage {name} is its own base")
        chain.insert(0, by_name[name])
        name = expand(by_name[name]["base"], global_args)
    if not chain:
        raise BuildError(f"the Dockerfile has no stage {target}")
    match = re.fullmatch(r"debian:([a-z]+)(-slim)?", name)
    if not match:
        raise BuildError(f"stage {chain[0]['name']} starts FROM {name}; only debian:<release>-slim "
                         "can be built without Docker (debootstrap)")
    config = {"User": "", "Env": {"PATH": DEFAULT_PATH}, "Labels": {}, "ExposedPorts": {},
              "Volumes": {}, "WorkingDir": "", "Entrypoint": None, "Cmd": None}
    base_steps, steps, copies = [], [], []
    for index, stage in enumerate(chain):
        args = {}
        cmd_set_here = False
        for op, rest in stage["instructions"]:
            env = {**args, **config["Env"]}
            if op == "ARG":
                declare_arg(rest, args, build_args, global_args)
            elif op == "ENV":
                config["Env"].update(pairs(rest, env, op))
            elif op == "LABEL":
                config["Labels"].update(pairs(rest, env, op))
            elif op == "USER":
                config["User"] = expand(rest, env)
            elif op == "EXPOSE":
                for port in expand(rest, env).split():
                    config["ExposedPorts"][port if "/" in port else f"{port}/tcp"] = {}
            elif op == "VOLUME":
                paths = json.loads(rest) if rest.startswith("[") else rest.split()
                config["Volumes"].update({expand(p, env): {} for p in paths})
            elif op == "ENTRYPOINT":
                config["Entrypoint"] = exec_form(rest)
                if not cmd_set_here:
                    config["Cmd"] = None  # as docker: a new entrypoint drops the base's CMD
            elif op == "CMD":
                config["Cmd"], cmd_set_here = exec_form(rest), True
            elif op == "STOPSIGNAL":
                config["StopSignal"] = expand(rest, env)
            elif op == "WORKDIR":
                path = os.path.join(config["WorkingDir"] or "/", expand(rest, env))
                config["WorkingDir"] = os.path.normpath(path)
                (base_steps if index == 0 else steps).append(
                    {"run": ["mkdir", "-p", config["WorkingDir"]], "user": "0:0",
                     "env": {"PATH": DEFAULT_PATH}})
            elif op == "RUN":
                if rest.startswith("--"):
                    raise BuildError(f"RUN {rest}: RUN flags need BuildKit")
                mentioned = [c["dest"] for c in copies if c["dest"] in rest]
                if mentioned:
                    # The copied binaries are layered on top of the RUN steps (so a code change
                    # re-tars only them): a RUN that reads them would see nothing.
                    raise BuildError(f"RUN {rest}: reads {mentioned[0]}, copied before it")
                run_env = {"PATH": DEFAULT_PATH, **config["Env"], **args}
                (base_steps if index == 0 else steps).append(
                    {"run": exec_form(rest), "user": config["User"] or "0:0", "env": run_env})
            elif op == "COPY" and index > 0:
                copies.extend(parse_copy(rest, env, by_name))
            else:
                raise BuildError(f"{op} in stage {stage['name']} cannot be built without Docker")
    return {"release": match.group(1), "base_steps": base_steps, "steps": steps,
            "copies": copies, "config": config}


def parse_copy(rest, env, stages):
    """`COPY --from=<stage> <src>... <dest>`: the builder's outputs are the binaries in --bin-dir."""
    words = shlex.split(rest)
    flags = [w for w in words if w.startswith("--")]
    paths = [expand(w, env) for w in words if not w.startswith("--")]
    if len(flags) != 1 or not flags[0].startswith("--from=") or flags[0][7:] not in stages:
        raise BuildError(f"COPY {rest}: only COPY --from=<builder stage> can be built here")
    *sources, dest = paths
    if len(sources) > 1 and not dest.endswith("/"):
        raise BuildError(f"COPY {rest}: several sources need a directory destination")
    return [{"binary": os.path.basename(source),
             "dest": os.path.join(dest, os.path.basename(source)) if dest.endswith("/") else dest}
            for source in sources]


# ---------------------------------------------------------------- layers


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


def walk(root, relative=""):
    """Every path under root (relative, sorted depth-first), without the mounted trees' contents."""
    for name in sorted(os.listdir(os.path.join(root, relative))):
        path = os.path.join(relative, name)
        yield path
        full = os.path.join(root, path)
        if os.path.isdir(full) and not os.path.islink(full) and path not in MOUNTED:
            yield from walk(root, path)


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


# ---------------------------------------------------------------- rootfs


def run(argv, log_file, what):
    with open(log_file, "ab") as out:
        status = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out).returncode
    if status != 0:
        with open(log_file, "rb") as out:
            tail = out.read()[-3000:].decode(errors="replace")
        raise BuildError(f"{what} failed (exit {status}); end of {log_file}:\n{tail}")


def numeric_user(rootfs, user):
    """USER as uid:gid, names and a missing group looked up in the image's passwd and group."""
    name, _, group = user.partition(":")

    def lookup(file, key, column):
        with open(os.path.join(rootfs, "etc", file), encoding="utf-8") as entries:
            for line in entries:
                fields = line.rstrip("\n").split(":")
                if fields[0] == key or fields[2] == key:
                    return fields[column]
        return None

    uid = name if name.isdigit() else lookup("passwd", name, 2)
    if uid is None:
        raise BuildError(f"USER {user}: no such user in the image")
    gid = group if group.isdigit() else lookup("group", group, 2) if group else (
        lookup("passwd", uid, 3) or "0")
    if gid is None:
        raise BuildError(f"USER {user}: no such group in the image")
    return f"{uid}:{gid}"


def run_steps(rootfs, steps, log_file):
    """The stage's RUN steps in a chroot, each as its USER, with its ENV and ARGs only. They
    resolve names with this machine's resolv.conf, as docker's RUN does with the engine's; the
    image's own file is put back as it was, so it is no change of the stage."""
    resolv = os.path.join(rootfs, "etc/resolv.conf")
    if os.path.islink(resolv):
        raise BuildError(f"{resolv} is a symbolic link: writing it would write this machine's")
    saved = None
    if os.path.exists(resolv):
        with open(resolv, "rb") as f:
            saved = (f.read(), os.stat(resolv))
    shutil.copyfile("/etc/resolv.conf", resolv)
    try:
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
    """Unmounts what a killed debootstrap left mounted in a stale build folder of ours."""
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [line.split()[1] for line in mounts]
    for point in sorted((p for p in points if p.startswith(path + "/")), reverse=True):
        subprocess.run(["umount", point], check=True)


def base_layer(cache, plan_, arch, mirror, level):
    """The base stage's rootfs and layer, built once per release, RUN steps and arch."""
    key = hashlib.sha256(json.dumps([RECIPE, plan_["release"], arch, plan_["base_steps"]],
                                    sort_keys=True).encode()).hexdigest()[:16]
    folder = os.path.join(cache, f"runtime-{key}")
    if os.path.exists(os.path.join(folder, "layer.json")):
        with open(os.path.join(folder, "layer.json"), encoding="utf-8") as f:
            return folder, key, json.load(f)
    if os.geteuid() != 0:
        raise BuildError("building the base rootfs needs root (debootstrap and chroot)")
    building = f"{folder}.building"
    if os.path.exists(building):
        unmount_below(building)
        shutil.rmtree(building)
    os.makedirs(building)
    rootfs, log_file = os.path.join(building, "rootfs"), os.path.join(building, "build.log")
    started = time.monotonic()
    log(f"debootstrap --variant=minbase {plan_['release']} ({mirror}); log: {log_file}")
    run(["debootstrap", "--variant=minbase", f"--arch={arch}", plan_["release"], rootfs, mirror],
        log_file, "debootstrap")
    slim(rootfs, plan_["release"])
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
    """The target stage's RUN/WORKDIR changes on top of the base rootfs, or None without any."""
    if not steps:
        return None
    key = hashlib.sha256(json.dumps(steps, sort_keys=True).encode()).hexdigest()[:16]
    cached, blob = (os.path.join(folder, f"stage-{key}.{ext}") for ext in ("json", "tar.gz"))
    if os.path.exists(cached):
        with open(cached, encoding="utf-8") as f:
            return json.load(f), blob
    if os.geteuid() != 0:
        raise BuildError("running the stage's RUN steps needs root (chroot)")
    base, scratch = os.path.join(folder, "rootfs"), os.path.join(folder, f"scratch-{key}")
    if os.path.exists(scratch):
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
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    with open(cached, "w", encoding="utf-8") as f:
        json.dump(layer, f)
    return layer, blob


def binary_layer(cache, target, rootfs, copies, bin_dir, level):
    """The binaries the stage COPYs, root-owned 0755, with their parent folders as in the base.
    The last one per target is kept, keyed by the binaries' stat, so an unchanged build is fast."""
    sources = []
    for copy_ in copies:
        source = os.path.join(bin_dir, copy_["binary"])
        if not os.path.isfile(source):
            raise BuildError(f"{source} is missing: build it first (cargo build --workspace, "
                             "with --release for the release profile)")
        sources.append((source, copy_["dest"].lstrip("/")))
    stats = [(s, d, os.stat(s).st_size, os.stat(s).st_mtime_ns, os.stat(s).st_ino)
             for s, d in sources]
    key = hashlib.sha256(json.dumps([stats, level]).encode()).hexdigest()
    cached = os.path.join(cache, f"binary-{target}.json")
    if os.path.exists(cached):
        with open(cached, encoding="utf-8") as f:
            layer = json.load(f)
        if layer.pop("key") == key:
            return layer
    entries, parents = [], set()
    for source, dest in sources:
        parent = os.path.dirname(dest)
        while parent and parent not in parents:
            parents.add(parent)
            parent = os.path.dirname(parent)
    for parent in sorted(parents):
        st = os.lstat(os.path.join(rootfs, parent)) if os.path.isdir(
            os.path.join(rootfs, parent)) else None
        info = tarfile.TarInfo(parent)
        info.type, info.mtime = tarfile.DIRTYPE, 0
        info.mode, info.uid, info.gid = ((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid)
                                         if st else (0o755, 0, 0))
        entries.append((info, None))
    for source, dest in sorted(sources, key=lambda s: s[1]):
        info = tarfile.TarInfo(dest)
        info.size, info.mode, info.mtime = os.stat(source).st_size, 0o755, 0
        entries.append((info, source))
    layer = write_layer(os.path.join(cache, f"binary-{target}.tar.gz"), entries, level)
    with open(cached, "w", encoding="utf-8") as f:
        json.dump({**layer, "key": key}, f)
    return layer


# ---------------------------------------------------------------- image layout


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


def sha256(data):
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def oci_arch():
    machine = platform.machine()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine)
    if arch is None:
        raise BuildError(f"no Debian/OCI architecture known for {machine}")
    return arch


def build(options):
    build_args = dict(arg.split("=", 1) for arg in options.build_arg)
    with open(options.dockerfile, encoding="utf-8") as f:
        plan_ = plan(f.read(), options.target, build_args)
    arch = oci_arch()
    os.makedirs(options.cache, exist_ok=True)
    with open(os.path.join(options.cache, ".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per cache
        folder, key, base = base_layer(options.cache, plan_, arch, options.mirror, 6)
        rootfs = os.path.join(folder, "rootfs")
        layers = [(base, os.path.join(folder, "layer.tar.gz"),
                   f"debootstrap --variant=minbase {plan_['release']} + base stage RUN "
                   f"(runtime-{key})")]
        stage = stage_layer(folder, plan_["steps"], 6)
        if stage:
            layers.append((*stage, "; ".join(" ".join(s["run"]) for s in plan_["steps"])))
        if plan_["copies"]:
            binaries = binary_layer(options.cache, options.target, rootfs, plan_["copies"],
                                    options.bin_dir, 1)
            layers.append((binaries, os.path.join(options.cache, f"binary-{options.target}.tar.gz"),
                           "COPY " + " ".join(c["dest"] for c in plan_["copies"])))
        write_archive(options.out, options.name, arch, plan_, layers, options.created)
    log(f"{options.name}: {options.out} ({os.path.getsize(options.out) >> 20} MiB)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dockerfile", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--name", required=True, help="image reference, e.g. streamkeeper/worker:0.1.0")
    parser.add_argument("--bin-dir", required=True, help="folder holding the COPY'd binaries")
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
