//! The Helm chart `charts/streamkeeper`: its CRD is the operator's, it lints strictly, what it
//! renders (default and non-default values) is accepted by the real apiserver, its schema refuses
//! bad values naming the field, and the pods it and the operator make pass Pod Security
//! `restricted`. Needs `SK_HELM` (tests/services/helm.sh) and the control plane of
//! tests/services/kube.sh.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod chart_support;
mod support;

use chart_support::*;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::wait::{await_condition, conditions};
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const CHART_CRD: &str = "crds/streamkeeper.dev_statefulstreamjobs.yaml";

#[test]
fn the_charts_crd_is_exactly_what_the_operator_prints() {
    let printed = succeed(
        Command::new(env!("CARGO_BIN_EXE_streamkeeper-operator")).arg("crd"),
        None,
    );
    let path = std::path::Path::new(CHART).join(CHART_CRD);
    let in_chart = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        in_chart == printed,
        "{} differs from `streamkeeper-operator crd`: run \
         `cargo run --bin streamkeeper-operator -- crd > charts/streamkeeper/{CHART_CRD}`",
        path.display()
    );
}

#[test]
fn the_chart_lints_strictly_with_default_and_custom_values() {
    succeed(Command::new(helm()).args(["lint", "--strict", CHART]), None);
    let values = values_file(&custom_values("payments"));
    succeed(
        Command::new(helm())
            .args(["lint", "--strict", CHART, "--values"])
            .arg(values.path()),
        None,
    );
}

/// The operator's rules (ClusterRole by default, Role with `watchNamespace`) hand the workers no
/// API access: no verbs on ServiceAccounts, Roles or RoleBindings; Secrets only `get` (by name)
/// and `create` (the job's worker token); pods only what rolling and reporting need.
#[test]
fn the_operators_rbac_gives_workers_nothing_and_secrets_only_get_and_create() {
    for (values, kind) in [("", "ClusterRole"), ("watchNamespace: payments\n", "Role")] {
        let file = values_file(values);
        let rendered = objects(&render(
            "sk",
            "streamkeeper-system",
            &["--values", file.path().to_str().unwrap()],
        ));
        let role = find(&rendered, kind, Some("sk-streamkeeper"));
        let rules = role["rules"].as_array().unwrap();
        let verbs_on = |group: &str, resource: &str| -> Vec<String> {
            rules
                .iter()
                .filter(|rule| {
                    rule["apiGroups"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|g| g == group)
                })
                .filter(|rule| {
                    rule["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|r| r == resource)
                })
                .flat_map(|rule| rule["verbs"].as_array().unwrap().clone())
                .map(|verb| verb.as_str().unwrap().to_string())
                .collect()
        };
        assert!(
            !rules.iter().any(|rule| rule["apiGroups"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g == "rbac.authorization.k8s.io")),
            "{kind}: {role}"
        );
        assert_eq!(
            verbs_on("", "serviceaccounts"),
            Vec::<String>::new(),
            "{kind}"
        );
        assert_eq!(verbs_on("", "secrets"), ["get", "create"], "{kind}");
        assert_eq!(verbs_on("", "pods"), ["list", "watch", "delete"], "{kind}");
    }
}

async fn create_namespace(client: &Client, prefix: &str, labels: Value) -> String {
    let name = support::unique_name(prefix);
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace created");
    name
}

async fn delete_namespace(client: &Client, name: &str) {
    let _ = Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await;
}

/// The prometheus-operator CRDs are not part of this cluster; a stand-in with the same group,
/// version and kinds (any spec) lets the apiserver check everything but the monitors' spec.
async fn ensure_monitoring_kinds(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (kind, plural) in [
        ("ServiceMonitor", "servicemonitors"),
        ("PodMonitor", "podmonitors"),
    ] {
        let name = format!("{plural}.monitoring.coreos.com");
        if crds.get_opt(&name).await.unwrap().is_some() {
            continue;
        }
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": "monitoring.coreos.com",
                "names": {"kind": kind, "plural": plural},
                "scope": "Namespaced",
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {
                    "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}]
            }
        }))
        .unwrap();
        crds.patch(
            &name,
            &PatchParams::apply("streamkeeper-chart-tests").force(),
            &Patch::Apply(&crd),
        )
        .await
        .unwrap();
        tokio::time::timeout(
            Duration::from_secs(30),
            await_condition(crds.clone(), &name, conditions::is_crd_established()),
        )
        .await
        .expect("the stand-in CRD is established within 30 s")
        .unwrap();
    }
}

/// `kubectl apply --dry-run=server` of `manifests`: every object passes the apiserver's
/// validation and admission, nothing is stored. Returns kubectl's report. No `--namespace`:
/// every namespaced object of the chart names its own (the release's or the watched one).
fn server_dry_run(manifests: &str) -> String {
    succeed(
        Command::new(kubectl()).args(["apply", "--dry-run=server", "-f", "-"]),
        Some(manifests),
    )
}

#[tokio::test]
async fn the_apiserver_accepts_the_chart_rendered_with_default_and_custom_values() {
    let client = support::kube_client().await;
    ensure_monitoring_kinds(&client).await;
    let release_ns = create_namespace(&client, "chart-release", json!({})).await;
    let watched = create_namespace(&client, "chart-watched", json!({})).await;
    let release = support::unique_name("sk");

    let default = render(&release, &release_ns, &["--include-crds"]);
    let default_objects = objects(&default);
    assert_eq!(
        kinds(&default_objects),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
    );
    let args = operator_args(&default_objects);
    assert!(
        args.contains(&"--metrics-addr=0.0.0.0:8080".to_string()),
        "{args:?}"
    );
    assert!(
        !args.iter().any(|arg| arg.starts_with("--namespace")),
        "{args:?}"
    );
    let report = server_dry_run(&default);
    for kind in [
        "deployment.apps",
        "clusterrole.rbac.authorization.k8s.io",
        "poddisruptionbudget.policy",
    ] {
        assert!(
            report.contains(kind) && report.contains("(server dry run)"),
            "{report}"
        );
    }

    let values = values_file(&custom_values(&watched));
    let custom = render(
        &release,
        &release_ns,
        &["--values", values.path().to_str().unwrap()],
    );
    let custom_objects = objects(&custom);
    assert_eq!(
        kinds(&custom_objects),
        [
            "Deployment",
            "NetworkPolicy",
            "PodDisruptionBudget",
            "PodMonitor",
            "Role",
            "Role",
            "RoleBinding",
            "RoleBinding",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
        ],
        "watching one namespace: a Role there instead of a ClusterRole"
    );
    let args = operator_args(&custom_objects);
    for expected in [
        "--metrics-addr=$(POD_IP):9090".to_string(),
        format!("--namespace={watched}"),
        "--max-concurrent-reconciles=4".into(),
        "--log-format=text".into(),
        "--lease-duration-seconds=20".into(),
        "--final-checkpoint-timeout-seconds=90".into(),
    ] {
        assert!(args.contains(&expected), "{expected} missing from {args:?}");
    }
    let role = custom_objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["namespace"] == watched.as_str())
        .expect("the operator's Role in the watched namespace");
    assert!(role["rules"].as_array().unwrap().len() > 5, "{role}");
    let pod = &find(&custom_objects, "Deployment", None)["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "streamkeeper-critical");
    assert_eq!(pod["serviceAccountName"], "streamkeeper-custom");
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example.com/platform/streamkeeper-operator:0.1.0-rc.1"
    );
    assert!(pod["affinity"]["nodeAffinity"].is_object(), "{pod}");
    server_dry_run(&custom);

    delete_namespace(&client, &release_ns).await;
    delete_namespace(&client, &watched).await;
}

#[test]
fn the_values_schema_refuses_bad_values_naming_the_field() {
    for (set, field, says) in [
        ("replicaCount=0", "/replicaCount", "minimum"),
        (
            "image.pullPolicy=Sometimes",
            "/image/pullPolicy",
            "IfNotPresent",
        ),
        ("watchNamespace=Payments_EU", "/watchNamespace", "pattern"),
        ("logging.format=xml", "/logging/format", "json"),
        ("metrics.port=70000", "/metrics/port", "maximum"),
        (
            "maxConcurrentReconciles=-1",
            "/maxConcurrentReconciles",
            "minimum",
        ),
        ("replicas=2", "replicas", "additional properties"),
        ("podAntiAffinity=sometimes", "/podAntiAffinity", "soft"),
    ] {
        let output = template("sk", "default", &["--set", set]);
        let stderr = text(&output.stderr);
        assert!(!output.status.success(), "{set} was accepted");
        assert!(
            stderr.contains(field) && stderr.contains(says),
            "{set}: the message should name {field} and say {says}: {stderr}"
        );
    }
    let output = template(
        "sk",
        "default",
        &["--set", "leaderElection.retryPeriodSeconds=12"],
    );
    assert!(!output.status.success());
    assert!(
        text(&output.stderr)
            .contains("retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds"),
        "{}",
        text(&output.stderr)
    );
    // A good value passes the same path, so the refusals above are the schema's doing.
    assert!(
        template("sk", "default", &["--set", "replicaCount=1"])
            .status
            .success()
    );
}

/// A Pod with `spec` (and the template's labels), as a workload controller would create it.
fn pod_from_template(name: &str, template: &Value) -> Pod {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": template["metadata"]["labels"]},
        "spec": template["spec"],
    });
    if let Some(annotations) = template["metadata"].get("annotations") {
        pod["metadata"]["annotations"] = annotations.clone();
    }
    serde_json::from_value(pod).unwrap()
}

/// The worker pod the operator builds for `examples/card-count.yaml` in `namespace`: the
/// StatefulSet's template plus the claim volume the StatefulSet controller adds.
fn worker_pod(namespace: &str) -> Pod {
    use streamkeeper::api::StatefulStreamJob;
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/card-count.yaml"
    ))
    .unwrap();
    let mut job: StatefulStreamJob = serde_yaml_ng::from_str(&example).unwrap();
    job.metadata.namespace = Some(namespace.into());
    job.metadata.uid = Some("0e5c1a7d-3f0b-4c55-9a52-1b2f5e6a7c80".into());
    let validated = streamkeeper::controller::validate(&job, None).expect("the example is valid");
    let desired = streamkeeper::controller::build(
        &validated,
        &streamkeeper::controller::Facts {
            tasks: 4,
            pods_kept: None,
        },
    );
    let set = serde_json::to_value(&desired.stateful_set).unwrap();
    let mut template = set["spec"]["template"].clone();
    for claim in set["spec"]["volumeClaimTemplates"].as_array().unwrap() {
        let volume = claim["metadata"]["name"].as_str().unwrap();
        template["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "name": volume,
                "persistentVolumeClaim": {"claimName": format!("{volume}-card-count-0")}
            }));
    }
    pod_from_template("card-count-0", &template)
}

async fn dry_run_create(pods: &Api<Pod>, pod: &Pod) -> Result<Pod, kube::Error> {
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    pods.create(&params, pod).await
}

#[tokio::test]
async fn restricted_pod_security_admits_the_operator_and_worker_pods_and_refuses_a_root_pod() {
    let client = support::kube_client().await;
    let namespace = create_namespace(
        &client,
        "chart-restricted",
        json!({
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);

    // The control: a pod that may run as root with the default capabilities is refused, so the
    // namespace does enforce `restricted` and an admission below means something.
    let control: Pod = serde_json::from_value(json!({
        "metadata": {"name": "control"},
        "spec": {"containers": [{"name": "c", "image": "streamkeeper/worker:0.1.0"}]}
    }))
    .unwrap();
    match dry_run_create(&pods, &control).await {
        Err(kube::Error::Api(status)) => assert!(
            status.code == 403 && status.message.contains("violates PodSecurity \"restricted"),
            "{status:?}"
        ),
        other => panic!("a non-compliant pod was not refused: {other:?}"),
    }

    for values in [String::new(), custom_values(&namespace)] {
        let file = values_file(&values);
        let rendered = objects(&render(
            "sk",
            &namespace,
            &["--values", file.path().to_str().unwrap()],
        ));
        let template = &find(&rendered, "Deployment", None)["spec"]["template"];
        let mut operator = pod_from_template("streamkeeper-operator", template);
        // Scheduling fields name things this cluster lacks; they are not what Pod Security checks.
        if let Some(spec) = operator.spec.as_mut() {
            spec.priority_class_name = None;
        }
        dry_run_create(&pods, &operator)
            .await
            .unwrap_or_else(|e| panic!("the chart's operator pod is refused: {e}"));
    }

    dry_run_create(&pods, &worker_pod(&namespace))
        .await
        .unwrap_or_else(|e| panic!("the operator's worker pod is refused: {e}"));

    delete_namespace(&client, &namespace).await;
}
