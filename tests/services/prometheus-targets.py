#!/usr/bin/env python3
"""Writes the file_sd targets file of tests/services/prometheus.sh, atomically (a temporary file in
the same folder, then a rename), so Prometheus, which rereads it every second, never sees half a
file.

  prometheus-targets.py FILE [--operator HOST:PORT] [--pods-json PATH|-]
                             [--worker HOST:PORT NAMESPACE POD JOB_NAME]...

--pods-json takes the output of `kubectl get pods -n NS -l SELECTOR -o json` (or of `kubectl get
pod NAME -o json`): one target per pod that has an IP and has not finished, at status.podIP and the
container port named `http` (else --worker-port), labelled namespace, pod and job_name (the pod
label streamkeeper.dev/job), as the chart's PodMonitor labels them. --worker adds one such target
by hand. Labels starting with __ are dropped by Prometheus after relabeling: `__job` sets the
`job` label through the scrape config's relabel rule.

Stdlib only: it runs with the system python3.
"""

import argparse
import json
import os
import sys
import tempfile

JOB_LABEL = "streamkeeper.dev/job"
FINISHED_PHASES = ("Succeeded", "Failed")


def http_port(pod, default):
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []) or []:
            if port.get("name") == "http" and port.get("containerPort"):
                return int(port["containerPort"])
    return default


def pod_groups(document, default_port, worker_job):
    """Target groups for the pods of a `kubectl get ... -o json` document (a List or one Pod)."""
    pods = document.get("items", []) if document.get("kind") != "Pod" else [document]
    groups = []
    for pod in pods:
        meta, status = pod.get("metadata", {}), pod.get("status", {})
        ip = status.get("podIP")
        if not ip or status.get("phase") in FINISHED_PHASES:
            continue
        groups.append(worker_group(
            f"{ip}:{http_port(pod, default_port)}",
            meta.get("namespace", ""),
            meta.get("name", ""),
            (meta.get("labels") or {}).get(JOB_LABEL, ""),
            worker_job,
        ))
    return groups


def worker_group(address, namespace, pod, job_name, worker_job):
    return {
        "targets": [address],
        "labels": {"__job": worker_job, "namespace": namespace, "pod": pod, "job_name": job_name},
    }


def write_atomically(path, groups):
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".targets-", suffix=".json", dir=folder)
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(groups, out, indent=2, sort_keys=True)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", help="the targets file, e.g. $SK_PROMETHEUS_TARGETS")
    parser.add_argument("--operator", metavar="HOST:PORT", help="the operator's metrics address")
    parser.add_argument("--operator-job", default="streamkeeper-operator",
                        help="job label of the operator's series (default: %(default)s)")
    parser.add_argument("--pods-json", metavar="PATH", help="kubectl get pods -o json output; - for stdin")
    parser.add_argument("--worker", nargs=4, action="append", default=[],
                        metavar=("HOST:PORT", "NAMESPACE", "POD", "JOB_NAME"),
                        help="one worker target by hand (repeatable)")
    parser.add_argument("--worker-port", type=int, default=8080,
                        help="port of pods without a container port named http (default: %(default)s)")
    parser.add_argument("--worker-job", default="streamkeeper-workers",
                        help="job label of the workers' series (default: %(default)s)")
    args = parser.parse_args()

    groups = []
    if args.operator:
        groups.append({"targets": [args.operator], "labels": {"__job": args.operator_job}})
    if args.pods_json:
        try:
            if args.pods_json == "-":
                document = json.load(sys.stdin)
            else:
                with open(args.pods_json) as f:
                    document = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"prometheus-targets.py: cannot read pods JSON from {args.pods_json}: {e}")
        groups.extend(pod_groups(document, args.worker_port, args.worker_job))
    for address, namespace, pod, job_name in args.worker:
        groups.append(worker_group(address, namespace, pod, job_name, args.worker_job))

    write_atomically(args.file, groups)
    print(f"prometheus-targets.py: {len(groups)} target group(s) in {args.file}", file=sys.stderr)


if __name__ == "__main__":
    main()
