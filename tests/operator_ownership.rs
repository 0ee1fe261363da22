//! The operator takes over nothing it did not create, against the real kube-apiserver: objects
//! of a user that happen to carry a new job's derived names (its worker ConfigMap, token
//! Secret, Service, PodDisruptionBudget) are refused one by one, each named in the `Ready`
//! condition, left as they were, and survive the job's deletion; once they are gone the job
//! applies as usual.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod operator_support;

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, PostParams};
use operator_support::*;
use std::collections::BTreeMap;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        labels: Some(BTreeMap::from([("team".into(), "payments".into())])),
        ..ObjectMeta::default()
    }
}

/// The user's objects with the names a job `name` derives.
fn users_objects(name: &str) -> (ConfigMap, Secret, Service, PodDisruptionBudget) {
    let selector = BTreeMap::from([("app".into(), "users-own".into())]);
    (
        ConfigMap {
            metadata: meta(&format!("{name}-worker-config")),
            data: Some(BTreeMap::from([("mine".into(), "yes".into())])),
            ..ConfigMap::default()
        },
        Secret {
            metadata: meta(&format!("{name}-worker-token")),
            string_data: Some(BTreeMap::from([(
                "token".into(),
                "a-users-own-secret-that-is-long-enough-to-pass".into(),
            )])),
            ..Secret::default()
        },
        Service {
            metadata: meta(name),
            spec: Some(ServiceSpec {
                selector: Some(selector.clone()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        },
        PodDisruptionBudget {
            metadata: meta(name),
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(0)),
                selector: Some(LabelSelector {
                    match_labels: Some(selector),
                    ..LabelSelector::default()
                }),
                ..PodDisruptionBudgetSpec::default()
            }),
            ..PodDisruptionBudget::default()
        },
    )
}

#[tokio::test]
async fn objects_of_the_jobs_names_that_are_not_its_own_are_refused_and_left_alone() {
    let s = setup("op-foreign", &[]).await;
    let ctx = context(&s.client);
    let name = "payments";
    let (config_map, secret, service, pdb) = users_objects(name);
    let config_maps: Api<ConfigMap> = Api::namespaced(s.client.clone(), &s.namespace);
    let secrets: Api<Secret> = Api::namespaced(s.client.clone(), &s.namespace);
    let services: Api<Service> = Api::namespaced(s.client.clone(), &s.namespace);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(s.client.clone(), &s.namespace);
    let post = PostParams::default();
    secrets.create(&post, &secret).await.unwrap();
    config_maps.create(&post, &config_map).await.unwrap();
    services.create(&post, &service).await.unwrap();
    pdbs.create(&post, &pdb).await.unwrap();
    s.jobs
        .create(&post, &job(name, &s.input, &s.prefix))
        .await
        .unwrap();

    // Each is refused in the order the apply meets them, and refused again until it is gone.
    let refusals = [
        ("Secret", format!("{name}-worker-token")),
        ("ConfigMap", format!("{name}-worker-config")),
        ("Service", name.to_string()),
        ("PodDisruptionBudget", name.to_string()),
    ];
    for (kind, object) in &refusals {
        reconcile_once(&ctx, &s.jobs, name).await.unwrap();
        let job = s.jobs.get(name).await.unwrap();
        let ready = condition(&job, "Ready");
        eprintln!("{kind}: {}", ready.message);
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ForeignObject")
        );
        let named = format!(
            "{kind} {}/{object} exists and is not this job's (it has no owner)",
            s.namespace
        );
        assert!(ready.message.starts_with(&named), "{}", ready.message);
        let dp = DeleteParams::default();
        match *kind {
            "Secret" => drop(secrets.delete(object, &dp).await.unwrap()),
            "ConfigMap" => drop(config_maps.delete(object, &dp).await.unwrap()),
            "Service" => drop(services.delete(object, &dp).await.unwrap()),
            _ => drop(pdbs.delete(object, &dp).await.unwrap()),
        }
    }
    // Nothing of the user's was changed while it was refused: recreate one and look again.
    pdbs.create(&post, &pdb).await.unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let theirs = pdbs.get(name).await.unwrap();
    assert!(
        theirs.metadata.owner_references.is_none(),
        "{:?}",
        theirs.metadata
    );
    assert_eq!(
        theirs.spec.unwrap().selector,
        pdb.spec.clone().unwrap().selector,
        "the user's selector is untouched"
    );
    pdbs.delete(name, &DeleteParams::default()).await.unwrap();
    reconcile_once(&ctx, &s.jobs, name).await.unwrap();
    let job = s.jobs.get(name).await.unwrap();
    assert_ne!(condition(&job, "Ready").reason, "ForeignObject");
    let ours = pdbs.get(name).await.unwrap();
    assert_eq!(
        ours.metadata.owner_references.unwrap()[0].uid,
        job.metadata.uid.clone().unwrap(),
        "now the job's own"
    );
    delete_namespace(&s.client, &s.namespace).await;
}
