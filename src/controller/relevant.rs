//! Which changes of a job a reconcile acts on: its spec, deletion, finalizers, annotations and
//! labels, not its status. The controller's watch triggers a reconcile only on these
//! ([`crate::controller::run`]), and a reconcile reads its Secrets anew after one.

use crate::api::StatefulStreamJob;

/// A hash of what a reconcile acts on: the spec (through `generation`), deletion, finalizers,
/// annotations and labels. The status and `resourceVersion` are left out.
pub fn reconcile_relevant(job: &StatefulStreamJob) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = &job.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.deletion_timestamp
        .as_ref()
        .map(|time| time.0.as_millisecond())
        .hash(&mut hasher);
    meta.finalizers.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    Some(hasher.finish())
}

/// A hash of what a person changes to announce a rotation of the job's Secrets: the spec
/// (through `generation`), annotations and labels. Not the finalizers the operator adds, nor a
/// deletion: each new job's finalizer would otherwise count as a touch.
pub fn touched(job: &StatefulStreamJob) -> u64 {
    use std::hash::{Hash, Hasher};
    let meta = &job.metadata;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut hasher);
    meta.annotations.hash(&mut hasher);
    meta.labels.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{JobPhase, StatefulStreamJobStatus};

    #[test]
    fn status_writes_do_not_trigger_a_reconcile_but_spec_and_metadata_changes_do() {
        let mut job = crate::controller::test_support::job();
        job.metadata.generation = Some(3);
        job.metadata.resource_version = Some("100".into());
        let before = reconcile_relevant(&job);
        job.status = Some(StatefulStreamJobStatus {
            phase: Some(JobPhase::Running),
            ready_tasks: Some("4/4".into()),
            ..StatefulStreamJobStatus::default()
        });
        job.metadata.resource_version = Some("101".into());
        assert_eq!(reconcile_relevant(&job), before, "a status write");
        for change in [
            |job: &mut StatefulStreamJob| job.metadata.generation = Some(4),
            |job: &mut StatefulStreamJob| job.metadata.finalizers = Some(vec!["f".into()]),
            |job: &mut StatefulStreamJob| {
                job.metadata.annotations = Some([("a".to_string(), "b".to_string())].into())
            },
        ] {
            let mut changed = job.clone();
            change(&mut changed);
            assert_ne!(reconcile_relevant(&changed), before);
        }
    }
}
