//! The chart's RBAC is enough, and no more than the operator needs: with the apiserver
//! impersonating the chart's ServiceAccount, the operator's own code elects a leader through its
//! Lease, reconciles a job against the real Kafka and S3 (every owned object applied, the job's
//! worker token Secret created, the status and Events written) and removes its finalizer on
//! deletion; the same identity is refused what the chart does not grant (listing or deleting
//! Secrets, creating Roles: the workers get no API access to hand out).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod chart_support;
mod operator_support;

use chart_support::{kubectl, render, succeed};
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::Role;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, Config};
use operator_support::{support, *};
use std::process::Command;
use streamkeeper::api::StatefulStreamJob;
use streamkeeper::leader::Leadership;
use streamkeeper::leader::{LeaderElector, LeaseSettings};

/// The chart's ServiceAccount and RBAC for `release` in `namespace`, applied for real (the
/// default values: a ClusterRole), and deleted again when dropped.
struct ChartRbac {
    namespace: String,
    manifests: String,
}

impl ChartRbac {
    fn apply(release: &str, namespace: &str) -> Self {
        let manifests = render(
            release,
            namespace,
            &[
                "--show-only",
                "templates/serviceaccount.yaml",
                "--show-only",
                "templates/rbac.yaml",
            ],
        );
        succeed(
            Command::new(kubectl()).args(["apply", "--namespace", namespace, "-f", "-"]),
            Some(&manifests),
        );
        Self {
            namespace: namespace.to_string(),
            manifests,
        }
    }
}

impl Drop for ChartRbac {
    fn drop(&mut self) {
        let _ = chart_support::run(
            Command::new(kubectl()).args([
                "delete",
                "--ignore-not-found",
                "--namespace",
                &self.namespace,
                "-f",
                "-",
            ]),
            Some(&self.manifests),
        );
    }
}

/// A client that the apiserver treats as `system:serviceaccount:<namespace>:<name>`.
async fn as_service_account(namespace: &str, name: &str) -> Client {
    support::kubeconfig();
    let mut config = Config::infer().await.unwrap();
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{namespace}:{name}"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{namespace}"),
        "system:authenticated".into(),
    ]);
    Client::try_from(config).unwrap()
}

fn forbidden(result: Result<impl std::fmt::Debug, kube::Error>, what: &str) {
    match result {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("{what} should be forbidden to the operator, got {other:?}"),
    }
}

#[tokio::test]
async fn the_operator_leads_and_reconciles_with_only_the_charts_rbac() {
    let admin = client().await;
    let ns = namespace(&admin, "chart-rbac").await;
    let release = support::unique_name("rbac");
    let _rbac = ChartRbac::apply(&release, &ns);
    // The chart's names: the release's full name for the account, the Role and the Lease.
    let fullname = format!("{release}-streamkeeper");
    let operator = as_service_account(&ns, &fullname).await;

    let elector = LeaderElector::new(
        operator.clone(),
        LeaseSettings::new(ns.clone(), fullname.clone(), "chart-rbac-test".into()),
        Leadership::elected(),
    );
    assert!(
        elector.try_acquire_or_renew().await.unwrap(),
        "acquires the Lease"
    );
    assert!(
        elector.try_acquire_or_renew().await.unwrap(),
        "renews the Lease"
    );
    let other = LeaderElector::new(
        operator.clone(),
        LeaseSettings::new(ns.clone(), "another-lease".into(), "chart-rbac-test".into()),
        Leadership::elected(),
    );
    assert!(
        other.try_acquire_or_renew().await.is_err(),
        "the Role names one Lease: another one cannot be read"
    );

    let name = "rbac-job";
    let input = support::unique_name("chart-rbac-in");
    create_topic(&input, 2, &[]).await;
    let jobs_admin: Api<StatefulStreamJob> = Api::namespaced(admin.clone(), &ns);
    jobs_admin
        .create(&PostParams::default(), &job(name, &input, &ns))
        .await
        .unwrap();
    let ctx = context(&operator);
    let jobs: Api<StatefulStreamJob> = Api::namespaced(operator.clone(), &ns);
    let sets: Api<StatefulSet> = Api::namespaced(admin.clone(), &ns);
    reconcile_until(
        &ctx,
        &jobs,
        name,
        "the StatefulSet and a status",
        async || {
            let status_written = jobs
                .get(name)
                .await
                .unwrap()
                .status
                .and_then(|s| s.observed_generation)
                .is_some();
            sets.get_opt(name).await.unwrap().is_some() && status_written
        },
    )
    .await;
    // The job's worker token Secret, created by the operator's identity (`create` on Secrets),
    // and nothing that gives the workers an identity of their own.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let token_secret = secrets.get(&format!("{name}-worker-token")).await.unwrap();
    assert!(token_secret.data.unwrap().contains_key("token"));
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
    assert!(
        accounts
            .get_opt(&format!("{name}-worker"))
            .await
            .unwrap()
            .is_none()
    );
    // (The chart's own leader-election Role lives in this namespace too: look for the job's.)
    let roles: Api<Role> = Api::namespaced(admin.clone(), &ns);
    let jobs_roles = ListParams::default().labels(&format!("streamkeeper.dev/job={name}"));
    assert!(roles.list(&jobs_roles).await.unwrap().items.is_empty());
    assert!(
        roles
            .get_opt(&format!("{name}-worker"))
            .await
            .unwrap()
            .is_none()
    );

    // What the chart does not grant.
    forbidden(
        Api::<Secret>::namespaced(operator.clone(), &ns)
            .list(&ListParams::default())
            .await,
        "listing Secrets",
    );
    forbidden(
        Api::<Secret>::namespaced(operator.clone(), &ns)
            .delete(&format!("{name}-worker-token"), &DeleteParams::default())
            .await,
        "deleting a Secret",
    );
    forbidden(
        Api::<StatefulSet>::namespaced(operator.clone(), &ns)
            .delete(name, &DeleteParams::default())
            .await,
        "deleting a StatefulSet (the garbage collector does that)",
    );
    let role: Role = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "worker-access"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
    }))
    .unwrap();
    forbidden(
        Api::<Role>::namespaced(operator.clone(), &ns)
            .create(&PostParams::default(), &role)
            .await,
        "creating a Role (the workers need none)",
    );
    forbidden(
        Api::<ServiceAccount>::namespaced(operator.clone(), &ns)
            .list(&ListParams::default())
            .await,
        "listing ServiceAccounts",
    );
    forbidden(
        jobs.delete(name, &DeleteParams::default()).await,
        "deleting a StatefulStreamJob",
    );

    // Deletion: the operator's clean-up (deletionPolicy Retain) removes its finalizer.
    jobs_admin
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
    let job_now = jobs.get(name).await.unwrap();
    streamkeeper::controller::reconcile::reconcile(std::sync::Arc::new(job_now), ctx.clone())
        .await
        .unwrap();
    assert!(
        jobs_admin.get_opt(name).await.unwrap().is_none(),
        "the job is gone once the operator removed its finalizer"
    );
    elector.release().await.unwrap();
    delete_namespace(&admin, &ns).await;
}
