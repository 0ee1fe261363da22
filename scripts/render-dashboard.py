#!/usr/bin/env python3
"""Renders a Grafana dashboard with real data, without Grafana: evaluates every panel's own PromQL
queries against a Prometheus over a time range, draws all panels into one PNG laid out as the
dashboard's grid, and reports which panels have data.

  scripts/render-dashboard.py --prometheus URL \\
      --dashboard charts/streamkeeper/dashboards/streamkeeper.json \\
      --start UNIX_S --end UNIX_S --out docs/dashboard.png [--json report.json]

Dashboard variables become their "All" value (`.*` for $namespace, $job_name, $operator_job; they
are used with =~) unless --var NAME=VALUE says otherwise; $__rate_interval follows Grafana's rule,
max(4 x scrape interval, step + scrape interval). Every panel is drawn as a time series.

Prints one line per panel (title, series, non-NaN points, NO DATA when none). Exit status: 0 when
every panel has data, 1 when one has none or its query failed (the PNG is written first), 2 when
Prometheus does not answer or the arguments are wrong.

matplotlib comes from PyPI into a venv in the streamkeeper cache; the script installs it on first
use and re-runs itself with that venv's python, so call it with any python3.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

MATPLOTLIB_VERSION = "3.11.2"
POINTS = 200


def cache_dir():
    """The cache folder of tests/services/lib.sh."""
    if os.environ.get("STREAMKEEPER_CACHE"):
        return Path(os.environ["STREAMKEEPER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "streamkeeper"


VENV = cache_dir() / "matplotlib" / MATPLOTLIB_VERSION / "venv"


def die(message, status=2):
    print(f"render-dashboard.py: ERROR: {message}", file=sys.stderr)
    sys.exit(status)


def run_in_venv():
    """Re-runs this script with the venv's python unless it already runs there; installs the venv
    first when it is missing or half-made (no stamp)."""
    if Path(sys.prefix).resolve() == VENV.resolve():
        return
    if os.environ.get("SK_RENDER_IN_VENV"):
        die(f"re-ran in {VENV} but sys.prefix is {sys.prefix}")
    python, stamp = VENV / "bin" / "python", VENV.parent / "installed"
    if not (stamp.exists() and python.exists()):
        print(f"render-dashboard.py: installing matplotlib=={MATPLOTLIB_VERSION} from PyPI into {VENV}",
              file=sys.stderr)
        stamp.unlink(missing_ok=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            subprocess.run([str(python), "-m", "pip", "install", "-q", f"matplotlib=={MATPLOTLIB_VERSION}"],
                           check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            die(f"could not install matplotlib=={MATPLOTLIB_VERSION} into {VENV}: {e}")
        stamp.touch()
    os.environ["SK_RENDER_IN_VENV"] = "1"
    os.execv(str(python), [str(python), os.path.abspath(__file__), *sys.argv[1:]])


# --- Prometheus -------------------------------------------------------------------------------

class QueryError(Exception):
    pass


def prometheus_get(url, path, params=None, timeout=30):
    full = url.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(full, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        # Prometheus answers bad queries with 400/422 and a JSON error body.
        try:
            body = json.load(e)
            raise QueryError(f"{body.get('errorType', e.code)}: {body.get('error', e.reason)}") from e
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise QueryError(f"HTTP {e.code} {e.reason} from {full}") from e


def check_prometheus(url):
    try:
        info = prometheus_get(url, "/api/v1/status/buildinfo", timeout=10)
    except (urllib.error.URLError, OSError, QueryError, json.JSONDecodeError) as e:
        die(f"Prometheus at {url} does not answer ({e}); is it running? (tests/services/prometheus.sh start)")
    return info.get("data", {}).get("version", "unknown")


def query_range(url, expr, start, end, step):
    try:
        body = prometheus_get(url, "/api/v1/query_range",
                              {"query": expr, "start": start, "end": end, "step": step})
    except (urllib.error.URLError, OSError) as e:
        die(f"Prometheus at {url} stopped answering ({e})")
    if body.get("status") != "success":
        raise QueryError(body.get("error", "query failed"))
    return body["data"]["result"]


# --- Dashboard --------------------------------------------------------------------------------

def panels_in_grid_order(dashboard):
    """All panels, rows included, those of collapsed rows too, sorted as the grid shows them."""
    flat = []
    for panel in dashboard.get("panels", []):
        flat.append(panel)
        flat.extend(panel.get("panels", []) if panel.get("type") == "row" else [])
    return sorted(flat, key=lambda p: (p.get("gridPos", {}).get("y", 0), p.get("gridPos", {}).get("x", 0)))


def format_duration(seconds):
    return f"{int(seconds)}s" if float(seconds).is_integer() else f"{int(round(seconds * 1000))}ms"


def variables(dashboard, overrides, step, scrape_interval, start, end):
    """Values for the dashboard's variables and Grafana's built-in interval ones."""
    values = {}
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") != "datasource":
            values[var["name"]] = var.get("allValue") or ".*"
    values.update(overrides)
    values.update({
        "__rate_interval": format_duration(max(4 * scrape_interval, step + scrape_interval)),
        "__interval": format_duration(step),
        "__interval_ms": str(int(step * 1000)),
        "__range": format_duration(end - start),
        "__range_s": str(int(end - start)),
    })
    return values


VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)\]\]|\$(\w+)")


def substitute(expr, values):
    def replace(match):
        name = match.group(1) or match.group(2) or match.group(3)
        return values.get(name, match.group(0))
    return VARIABLE.sub(replace, expr)


LEGEND_LABEL = re.compile(r"\{\{\s*([\w.]+)\s*\}\}")


def legend(target, metric):
    fmt = target.get("legendFormat") or ""
    if fmt and fmt != "__auto":
        text = LEGEND_LABEL.sub(lambda m: metric.get(m.group(1), ""), fmt).strip()
        if text:  # a format whose labels are all missing says nothing: fall through to the labels
            return text
    name = metric.get("__name__", "")
    labels = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}" if labels or not name else name


def evaluate(url, panel, values, start, end, step):
    """Runs the panel's visible targets; returns its series and a report entry."""
    series, targets = [], []
    for target in panel.get("targets", []):
        if target.get("hide") or not target.get("expr"):
            continue
        expr = substitute(target["expr"], values)
        entry = {"refId": target.get("refId"), "expr": expr, "series": 0, "points": 0}
        try:
            result = query_range(url, expr, start, end, step)
        except QueryError as e:
            entry["error"] = str(e)
            targets.append(entry)
            continue
        for item in result:
            points = [(float(t), float(v)) for t, v in item.get("values", [])]
            real = sum(1 for _, v in points if not math.isnan(v))
            series.append((legend(target, item.get("metric", {})), points))
            entry["series"] += 1
            entry["points"] += real
        targets.append(entry)
    report = {
        "title": panel.get("title", ""),
        "series": sum(t["series"] for t in targets),
        "points": sum(t["points"] for t in targets),
        "targets": targets,
    }
    report["no_data"] = report["points"] == 0
    errors = [t["error"] for t in targets if "error" in t]
    if errors:
        report["errors"] = errors
    return series, report


# --- Drawing ----------------------------------------------------------------------------------

SI = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
IEC = [(2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki")]


def scaled(value, prefixes, suffix):
    for factor, prefix in prefixes:
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{suffix}".rstrip()
    return f"{value:.3g} {suffix}".rstrip()


def seconds(value):
    magnitude = abs(value)
    if magnitude == 0:
        return "0 s"
    for factor, name in ((86400, "day"), (3600, "h"), (60, "min"), (1, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if magnitude >= factor:
            return f"{value / factor:.3g} {name}"
    return f"{value * 1e9:.3g} ns"


# Grafana's simple units; anything else is shown as a plain number with the unit as axis label.
UNITS = {
    "short": lambda v: scaled(v, SI, ""),
    "none": lambda v: f"{v:.3g}",
    "ops": lambda v: scaled(v, SI, "ops/s"),
    "reqps": lambda v: scaled(v, SI, "req/s"),
    "rps": lambda v: scaled(v, SI, "rd/s"),
    "wps": lambda v: scaled(v, SI, "wr/s"),
    "Bps": lambda v: scaled(v, SI, "B/s"),
    "binBps": lambda v: scaled(v, IEC, "B/s"),
    "bytes": lambda v: scaled(v, IEC, "B"),
    "decbytes": lambda v: scaled(v, SI, "B"),
    "s": seconds,
    "ms": lambda v: seconds(v / 1e3),
    "percent": lambda v: f"{v:.3g}%",
    "percentunit": lambda v: f"{v * 100:.3g}%",
}


def with_gaps(points, step):
    """Grafana leaves a gap where a step has no sample: put a NaN into each hole."""
    xs, ys = [], []
    for t, v in points:
        if xs and t - xs[-1] > 1.5 * step:
            xs.append(xs[-1] + step)
            ys.append(float("nan"))
        xs.append(t)
        ys.append(v if math.isfinite(v) else float("nan"))
    return xs, ys


def draw(panels, dashboard, start, end, step, out):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    # Inches per grid column and per grid row; the title band on top, room for the last legend below.
    unit_w, unit_h, header, footer = 0.9, 0.42, 0.7, 0.5
    grid_h = max((p["gridPos"].get("y", 0) + p["gridPos"].get("h", 8) for p, _, _ in panels), default=1)
    width, height = 24 * unit_w, grid_h * unit_h + header + footer
    fig = plt.figure(figsize=(width, height), dpi=90)
    span = f"{utc(start):%Y-%m-%d %H:%M:%S} to {utc(end):%H:%M:%S} UTC, step {format_duration(step)}"
    fig.text(0.01, 1 - 0.25 / height, f"{dashboard.get('title', 'dashboard')}  ({span})",
             fontsize=14, weight="bold", va="top")

    def rect(gp, pad_l, pad_r, pad_t, pad_b):  # grid units to figure fractions, padding in inches
        x, y, w, h = gp.get("x", 0), gp.get("y", 0), gp.get("w", 12), gp.get("h", 8)
        left = (x * unit_w + pad_l) / width
        top = 1 - (header + y * unit_h + pad_t) / height
        return [left, top - (h * unit_h - pad_t - pad_b) / height,
                (w * unit_w - pad_l - pad_r) / width, (h * unit_h - pad_t - pad_b) / height]

    locator = mdates.AutoDateLocator(minticks=4, maxticks=8)
    for panel, series, report in panels:
        gp = panel["gridPos"]
        if panel.get("type") == "row":
            fig.text(rect(gp, 0.1, 0, 0, 0)[0], 1 - (header + gp.get("y", 0) * unit_h + 0.12) / height,
                     panel.get("title", ""), fontsize=13, weight="bold", va="top")
            continue
        shown = series[:8]
        legend_lines = math.ceil(len(shown) / 2) + (1 if len(series) > len(shown) else 0)
        ax = fig.add_axes(rect(gp, 0.85, 0.2, 0.45, 0.45 + 0.17 * legend_lines))
        ax.set_title(panel.get("title", ""), fontsize=10, loc="left")
        for label, points in series:
            xs, ys = with_gaps(points, step)
            few = sum(1 for y in ys if not math.isnan(y)) <= 60
            ax.plot([utc(x) for x in xs], ys, label=label, linewidth=1.2,
                    marker="o" if few else None, markersize=2.5)
        ax.set_xlim(utc(start), utc(end))
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=timezone.utc))
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.3)
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if unit in UNITS:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos, f=UNITS[unit]: f(v)))
        elif unit:
            ax.set_ylabel(unit, fontsize=7)
        if report["no_data"]:
            text = "No data" if "errors" not in report else "Query error:\n" + report["errors"][0][:120]
            ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center",
                    fontsize=11, color="#a33", wrap=True)
            ax.set_yticks([])
        if shown:
            handles, labels = ax.get_legend_handles_labels()
            extra = len(series) - len(shown)
            if extra:
                handles.append(plt.Line2D([], [], linestyle="none"))
                labels.append(f"... and {extra} more")
            ax.legend(handles[:len(shown) + (1 if extra else 0)], labels[:len(shown) + (1 if extra else 0)],
                      loc="upper left", bbox_to_anchor=(0, -0.1 - 0.12 / (gp.get("h", 8) / 8)),
                      ncol=2, fontsize=7, frameon=False, borderaxespad=0, handlelength=1.5)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


def utc(ts):
    return datetime.fromtimestamp(ts, tz=timezone.utc)


# --- Main -------------------------------------------------------------------------------------

def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prometheus", required=True, metavar="URL", help="e.g. $SK_PROMETHEUS_URL")
    parser.add_argument("--dashboard", required=True, metavar="FILE", help="the Grafana dashboard JSON")
    parser.add_argument("--start", required=True, type=float, metavar="UNIX_S")
    parser.add_argument("--end", required=True, type=float, metavar="UNIX_S")
    parser.add_argument("--out", required=True, metavar="PNG")
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    parser.add_argument("--scrape-interval", type=float, default=1.0, metavar="SECONDS",
                        help="the scrape interval, for $__rate_interval (default: %(default)s)")
    parser.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                        help="a dashboard variable's value instead of its All value (repeatable)")
    args = parser.parse_args()
    if args.end <= args.start:
        parser.error("--end must be after --start")
    if args.scrape_interval <= 0:
        parser.error("--scrape-interval must be positive")
    overrides = {}
    for item in args.var:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--var {item!r} is not NAME=VALUE")
        overrides[name] = value
    args.overrides = overrides
    return args


def main():
    args = parse_args()
    run_in_venv()
    try:
        with open(args.dashboard) as f:
            dashboard = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        die(f"cannot read dashboard {args.dashboard}: {e}")
    version = check_prometheus(args.prometheus)

    start, end = args.start, args.end
    step = max(args.scrape_interval, math.ceil((end - start) / POINTS))
    values = variables(dashboard, args.overrides, step, args.scrape_interval, start, end)
    print(f"Prometheus {version} at {args.prometheus}; {utc(start):%Y-%m-%d %H:%M:%S} to "
          f"{utc(end):%H:%M:%S} UTC, step {format_duration(step)}, "
          f"$__rate_interval {values['__rate_interval']}")

    panels, reports = [], []
    for panel in panels_in_grid_order(dashboard):
        if panel.get("type") == "row":
            panels.append((panel, [], None))
            continue
        series, report = evaluate(args.prometheus, panel, values, start, end, step)
        panels.append((panel, series, report))
        reports.append(report)
        status = ""
        if "errors" in report:
            status = "  QUERY ERROR: " + "; ".join(report["errors"])
        elif report["no_data"]:
            status = "  NO DATA"
        print(f"{report['title']}: {report['series']} series, {report['points']} points{status}")

    draw(panels, dashboard, start, end, step, args.out)
    empty = [r["title"] for r in reports if r["no_data"]]
    print(f"wrote {args.out}: {len(reports) - len(empty)} of {len(reports)} panels have data")
    if args.json:
        summary = {
            "prometheus": args.prometheus, "dashboard": args.dashboard, "start": start, "end": end,
            "step": step, "rate_interval": values["__rate_interval"], "png": args.out,
            "panels": reports, "panels_without_data": empty,
        }
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
    sys.exit(1 if empty else 0)


if __name__ == "__main__":
    main()
