//! Writes to a job's status subresource: a JSON merge patch of some of its fields, so each
//! writer (the reconcile's status step, the records of created topics and owner records) changes
//! only what it owns.

use super::apply::ApiError;
use crate::api::StatefulStreamJob;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

/// Merges `fields` (an object of status fields) into the status of job `namespace`/`name`;
/// `action` names the write in the error ("record the created topics in the status of").
pub async fn merge_status(
    client: &Client,
    (namespace, name): (&str, &str),
    fields: serde_json::Value,
    action: &'static str,
) -> Result<(), ApiError> {
    let api: Api<StatefulStreamJob> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({ "status": fields });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|source| ApiError {
            action,
            kind: "StatefulStreamJob".into(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        })?;
    Ok(())
}
