//! Where the assignment document is kept: a ConfigMap `<job>-assignment`, owned by the job.
//! It is written before any worker hears of a new generation, so a new operator leader reads
//! back exactly what the workers act on and goes on from it, never shuffling tasks.

use crate::controller::apply::{ApiError, server_side_apply};
use crate::controller::names;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::Api;
use std::collections::BTreeMap;
use streamkeeper_contract::{AssignmentDocument, Versioned};

const KEY: &str = "assignment.json";

/// The stored document; `None` when there is none yet or it cannot be read (then the next
/// decision starts from the workers' reports alone, and the generation starts over above any
/// the workers recorded, see [`crate::failover`]).
pub async fn read(
    client: &Client,
    namespace: &str,
    job: &str,
) -> Result<Option<AssignmentDocument>, ApiError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let name = names::assignment_config_map(job);
    let found = api.get_opt(&name).await.map_err(|source| ApiError {
        action: "read",
        kind: "ConfigMap".into(),
        namespace: namespace.to_string(),
        name: name.clone(),
        source,
    })?;
    let text = found.and_then(|map| map.data?.remove(KEY));
    Ok(text.and_then(|text| match AssignmentDocument::from_json(text.as_bytes()) {
        Ok(document) => Some(document),
        Err(error) => {
            tracing::warn!(%namespace, %job, %error, "the stored assignment does not parse; deciding afresh");
            None
        }
    }))
}

/// Stores `document` for the job.
pub async fn write(
    client: &Client,
    namespace: &str,
    job: &str,
    owner: &OwnerReference,
    document: &AssignmentDocument,
) -> Result<(), ApiError> {
    let map = ConfigMap {
        metadata: ObjectMeta {
            name: Some(names::assignment_config_map(job)),
            namespace: Some(namespace.to_string()),
            owner_references: Some(vec![owner.clone()]),
            labels: Some(crate::controller::labels::selector(job)),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            KEY.to_string(),
            String::from_utf8_lossy(&document.to_json()).into_owned(),
        )])),
        ..ConfigMap::default()
    };
    server_side_apply(client, namespace, &map).await.map(drop)
}
