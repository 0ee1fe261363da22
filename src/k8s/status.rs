//! Writes to a job's status subresource: a JSON merge patch of some of its fields, so each
//! writer (the reconcile's status step, the records of created topics and owner records) changes
//! only what it owns. Each write is remembered ([`StatusWrites`]), so that a reconcile knows
//! whether the watch cache's copy of the job already holds this process's last write.

use super::apply::ApiError;
use crate::api::StatefulStreamJob;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The `resourceVersion` each job had after this process last wrote its status.
#[derive(Debug, Default)]
pub struct StatusWrites(Mutex<HashMap<(String, String), String>>);

impl StatusWrites {
    fn written(&self) -> MutexGuard<'_, HashMap<(String, String), String>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, (namespace, name): (&str, &str), version: Option<String>) {
        let key = (namespace.to_string(), name.to_string());
        match version {
            Some(version) => self.written().insert(key, version),
            None => self.written().remove(&key),
        };
    }

    /// Whether `job`, as a watch cache holds it, is at or past this process's last write of
    /// its status. Unknown (a version that is not a number) counts as behind.
    pub fn seen_in(&self, job: &StatefulStreamJob) -> bool {
        let key = (job.namespace().unwrap_or_default(), job.name_any());
        let written = self.written();
        let Some(last_write) = written.get(&key) else {
            return true;
        };
        at_or_past(job.resource_version().as_deref(), last_write)
    }

    /// Forgets a deleted job.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.record((namespace, name), None);
    }
}

/// Whether `version` is at or past `last_write`. Kubernetes resource versions compare as
/// numbers within one resource (they are etcd revisions, and since 1.34 the comparison is part
/// of the API); anything else is taken as behind, which costs one read and nothing more.
fn at_or_past(version: Option<&str>, last_write: &str) -> bool {
    match (
        version.and_then(|v| v.parse::<u64>().ok()),
        last_write.parse::<u64>().ok(),
    ) {
        (Some(version), Some(last_write)) => version >= last_write,
        _ => false,
    }
}

/// Merges `fields` (an object of status fields) into the status of job `namespace`/`name`;
/// `action` names the write in the error ("record the created topics in the status of").
pub async fn merge_status(
    (client, writes): (&Client, &StatusWrites),
    (namespace, name): (&str, &str),
    fields: serde_json::Value,
    action: &'static str,
) -> Result<(), ApiError> {
    let api: Api<StatefulStreamJob> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({ "status": fields });
    let written = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(|source| ApiError {
            action,
            kind: "StatefulStreamJob".into(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        })?;
    writes.record((namespace, name), written.resource_version());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_at(version: &str) -> StatefulStreamJob {
        let mut job = crate::controller::test_support::job();
        job.metadata.resource_version = Some(version.into());
        job
    }

    #[test]
    fn a_cached_job_is_current_unless_behind_this_processs_last_write() {
        let writes = StatusWrites::default();
        let job = job_at("100");
        assert!(writes.seen_in(&job), "nothing written yet");
        let key = (job.namespace().unwrap(), job.name_any());
        writes.record((&key.0, &key.1), Some("120".into()));
        assert!(!writes.seen_in(&job), "the cache is behind the write");
        assert!(writes.seen_in(&job_at("120")), "the write itself");
        assert!(writes.seen_in(&job_at("135")), "a later change");
        writes.forget(&key.0, &key.1);
        assert!(writes.seen_in(&job));
    }

    #[test]
    fn a_version_that_is_not_a_number_counts_as_behind() {
        assert!(!at_or_past(Some("abc"), "120"));
        assert!(!at_or_past(None, "120"));
        assert!(!at_or_past(Some("130"), "x"));
        assert!(at_or_past(Some("1000"), "999"), "numbers, not strings");
    }
}
