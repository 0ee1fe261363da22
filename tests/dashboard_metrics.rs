//! Issue 12: every metric the Grafana dashboard the chart ships names is exported by the
//! operator or the worker, so no panel stays empty because a metric was renamed or never
//! registered.
//!
//! The exported names come from each side's metrics, which list every family they register:
//! `/metrics` leaves a labelled family out until its first sample, so scraping a fresh process
//! would miss them. A series name follows from the family's type (a counter `x` is scraped as
//! `x_total`, a histogram as `x_bucket`, `x_sum` and `x_count`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use prometheus_client::metrics::MetricType;
use std::collections::BTreeSet;

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/charts/streamkeeper/dashboards/streamkeeper.json"
);

/// PromQL words followed by a list of label names.
const LABEL_LISTS: [&str; 6] = [
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// PromQL words that are not metrics even when no `(` follows them: binary operators and
/// modifiers, and the aggregations, written `sum by (...) (...)` as often as `sum(...)`.
const KEYWORDS: &[&str] = &[
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    "group_left",
    "group_right",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
];

/// Every `expr` in the dashboard (panels, nested rows, templating queries).
fn expressions(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", serde_json::Value::String(expr)) => out.push(expr.clone()),
                    _ => expressions(value, out),
                }
            }
        }
        serde_json::Value::Array(list) => list.iter().for_each(|value| expressions(value, out)),
        _ => {}
    }
}

/// `text` without what lies between `open` and its matching `close`, brackets included.
fn without_groups(text: &str, open: char, close: char) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        if c == open {
            depth += 1;
        } else if c == close && depth > 0 {
            depth -= 1;
        } else if depth == 0 {
            out.push(c);
        }
    }
    out
}

/// The metric names a PromQL expression reads: identifiers outside label matchers, ranges and
/// strings, neither a function (followed by `(`), a keyword, a number nor a Grafana variable;
/// the label lists of `by (...)`, `on (...)` and the like are left out.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let text = without_groups(&without_groups(expr, '{', '}'), '[', ']');
    let chars: Vec<char> = text.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' || c == '`' {
            i += chars[i + 1..]
                .iter()
                .position(|&end| end == c)
                .map_or(chars.len(), |end| end + 2);
            continue;
        }
        let starts_word = c.is_ascii_alphabetic() || c == '_' || c == ':';
        let after_variable_or_number =
            i > 0 && (chars[i - 1] == '$' || chars[i - 1].is_ascii_digit() || chars[i - 1] == '.');
        if !starts_word {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
        {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        if after_variable_or_number {
            continue;
        }
        let rest = chars[i..].iter().position(|c| !c.is_whitespace());
        let next = rest.map(|offset| (i + offset, chars[i + offset]));
        if let Some((paren, '(')) = next {
            if LABEL_LISTS.contains(&word.as_str()) {
                // `by (label, ...)` and the like name labels: skip the list.
                i = chars[paren..]
                    .iter()
                    .position(|&c| c == ')')
                    .map_or(chars.len(), |close| paren + close + 1);
            }
            // Otherwise a function.
            continue;
        }
        if KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
            continue;
        }
        names.insert(word);
    }
    names
}

/// The series a family of `kind` named `name` is scraped as.
fn series(name: &str, kind: MetricType) -> Vec<String> {
    let suffixes: &[&str] = match kind {
        MetricType::Counter => &["_total"],
        MetricType::Histogram => &["_bucket", "_sum", "_count"],
        MetricType::Info => &["_info"],
        MetricType::Gauge | MetricType::Unknown => &[""],
    };
    suffixes
        .iter()
        .map(|suffix| format!("{name}{suffix}"))
        .collect()
}

fn exported_series(families: &[(String, MetricType)]) -> BTreeSet<String> {
    families
        .iter()
        .flat_map(|(name, kind)| series(name, *kind))
        .collect()
}

fn dashboard_names() -> BTreeSet<String> {
    let text = std::fs::read_to_string(DASHBOARD).expect("the dashboard is readable");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut exprs = Vec::new();
    expressions(&dashboard, &mut exprs);
    exprs.iter().flat_map(|expr| metric_names(expr)).collect()
}

#[test]
fn every_metric_the_dashboard_names_is_exported_by_the_operator_or_the_worker() {
    let operator = streamkeeper::telemetry::metrics::Metrics::new();
    let worker = streamkeeper_worker::metrics::WorkerMetrics::new();
    let exported: BTreeSet<String> = exported_series(operator.families())
        .into_iter()
        .chain(exported_series(worker.families()))
        .collect();
    let named = dashboard_names();
    // Not vacuous: the extraction finds the panels' metrics.
    assert!(named.len() >= 30, "only {named:?}");
    assert!(named.contains("streamkeeper_operator_reconcile_duration_seconds_bucket"));
    let missing: Vec<&String> = named.difference(&exported).collect();
    assert!(
        missing.is_empty(),
        "the dashboard names metrics nobody exports: {missing:?}\nexported: {exported:?}"
    );
}

#[test]
fn metric_names_leave_out_functions_labels_ranges_and_variables() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{job=~"$operator_job", x="y z"}[$__rate_interval]))) / on (pod) group_left b_total + time() - c offset 5m"#,
    );
    let expected: BTreeSet<String> = ["a_seconds_bucket", "b_total", "c"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, expected);
}

#[test]
fn series_names_follow_the_family_type() {
    let families = [
        ("a".to_string(), MetricType::Counter),
        ("b".to_string(), MetricType::Gauge),
        ("c".to_string(), MetricType::Histogram),
    ];
    let expected: BTreeSet<String> = ["a_total", "b", "c_bucket", "c_sum", "c_count"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(exported_series(&families), expected);
}

#[test]
fn the_families_listed_are_the_ones_served_once_sampled() {
    // The list is kept beside the registry: every name in it must also be what /metrics
    // serves, so a sampled family's series appear in the text under the listed name.
    let worker = streamkeeper_worker::metrics::WorkerMetrics::new();
    worker.phase_transition(0, streamkeeper_contract::task_report::TaskPhase::Running);
    let text = worker.encode();
    assert!(
        text.contains("# TYPE streamkeeper_task_phase_transitions counter"),
        "{text}"
    );
    let listed = exported_series(worker.families());
    assert!(listed.contains("streamkeeper_task_phase_transitions_total"));
    let operator = streamkeeper::telemetry::metrics::Metrics::new();
    // Its labelled families get a sample; the rest are plain metrics, always served.
    operator.reconcile_started().done(Some("KafkaUnavailable"));
    operator.object_apply("ConfigMap", true);
    operator.apiserver_request("get", "secrets".into());
    operator.s3_request("ListObjectsV2");
    let text = operator.encode();
    for (name, _) in operator.families() {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "{name} not in\n{text}"
        );
    }
}
