"""Reads a Dockerfile into what scripts/oci_image.py builds for one target: the plan.

The target's stage chain must start FROM debian:<release>-slim (it becomes a debootstrap'd
rootfs). The plan holds that release, the first stage's RUN/WORKDIR steps (baked into the base
layer), the later stages' RUN/WORKDIR steps (one more layer), every COPY of the chain (one layer
each, put on top of the RUN layers) and the image config (USER, ENV, LABEL, EXPOSE, VOLUME,
WORKDIR, ENTRYPOINT, CMD, STOPSIGNAL). Anything else (ADD, SHELL, RUN flags, COPY flags other
than --from and --chown) stops the build rather than being ignored. Pure: no files, no processes.
"""

import json
import os
import re
import shlex

from oci_common import DEFAULT_PATH, BuildError


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
            words = [w for w in rest.split() if not w.startswith("--platform=")]
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


def parse_copy(rest, env, workdir, stages):
    """`COPY [--from=<stage>] [--chown=<user>[:<group>]] <src>... <dest>` as {from, sources,
    dest, dest_is_dir, chown, line}. Where a source lives (the build context, or the folder that
    stands for a stage) is the build's business, not the plan's."""
    words = shlex.split(rest)
    flags = dict(w[2:].partition("=")[::2] for w in words if w.startswith("--"))
    paths = [expand(w, env) for w in words if not w.startswith("--")]
    unknown = set(flags) - {"from", "chown"}
    if unknown:
        raise BuildError(f"COPY {rest}: --{sorted(unknown)[0]} cannot be built without Docker")
    source_stage = flags.get("from")
    if source_stage is not None and source_stage not in stages:
        raise BuildError(f"COPY {rest}: --from names no stage of this Dockerfile")
    if len(paths) < 2:
        raise BuildError(f"COPY {rest}: expected sources and a destination")
    *sources, dest = paths
    if any(c in source for source in sources for c in "*?["):
        raise BuildError(f"COPY {rest}: wildcards cannot be built without Docker")
    dest_is_dir = dest.endswith("/") or len(sources) > 1
    dest = os.path.normpath(os.path.join(workdir or "/", dest))
    return {"from": source_stage, "sources": sources, "dest": dest, "dest_is_dir": dest_is_dir,
            "chown": expand(flags["chown"], env) if "chown" in flags else None,
            "line": f"COPY {rest}"}


def mentions_copied(command, copies):
    """The first copied path (or a folder above it) a later RUN names: the builder layers the
    copies above every RUN, so such a RUN would not see what Docker's would."""
    for copy_ in copies:
        path = copy_["dest"]
        while path not in ("/", ""):
            if re.search(re.escape(path) + r"(?![\w.-])", command):
                return path
            path = os.path.dirname(path)
    return None


def plan(dockerfile_text, target, build_args):
    """What to build for `target`: the base stage's release and steps, the later stages' steps,
    the copies and the image config, all read from the Dockerfile."""
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
                mentioned = mentions_copied(rest, copies)
                if mentioned:
                    raise BuildError(f"RUN {rest}: reads {mentioned}, copied before it (the "
                                     "builder layers every COPY above the RUN steps)")
                run_env = {"PATH": DEFAULT_PATH, **config["Env"], **args}
                (base_steps if index == 0 else steps).append(
                    {"run": exec_form(rest), "user": config["User"] or "0:0", "env": run_env})
            elif op == "COPY":
                copies.append(parse_copy(rest, env, config["WorkingDir"], by_name))
            else:
                raise BuildError(f"{op} in stage {stage['name']} cannot be built without Docker")
    return {"release": match.group(1), "base_steps": base_steps, "steps": steps,
            "copies": copies, "config": config}
