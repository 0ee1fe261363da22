//! Checkpoint manifests written straight to the real S3 server, as a worker would write them,
//! so the operator's status can be checked without running workers.

use super::{s3_client, support};
use aws_sdk_s3::primitives::ByteStream;
use streamkeeper_contract::{CheckpointManifest, OwnerMarker, TaskPrefix, Versioned};

/// A manifest of `task` with no files.
pub fn manifest(
    task: u32,
    sequence: u64,
    changelog_offset: i64,
    created_at_ms: u64,
    input_offset: i64,
) -> CheckpointManifest {
    CheckpointManifest {
        version: 1,
        task,
        sequence,
        owner: "counts-0".into(),
        assignment_generation: 1,
        created_at_ms,
        input_offset,
        changelog_offset,
        newest_record_ms: created_at_ms,
        processor_kind: "count".into(),
        state_format_version: 1,
        files: vec![],
        changelog_incarnation: None,
    }
}

/// Writes `manifest` where the job's workers would; returns its key.
pub async fn put_manifest(
    prefix: &str,
    namespace: &str,
    job: &str,
    manifest: &CheckpointManifest,
) -> String {
    let key =
        TaskPrefix::new(prefix, namespace, job, manifest.task).manifest_key(manifest.sequence);
    s3_client()
        .put_object()
        .bucket(support::s3_settings().bucket)
        .key(&key)
        .body(ByteStream::from(manifest.to_json()))
        .send()
        .await
        .expect("manifest written");
    key
}

pub fn now_ms() -> u64 {
    u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Writes the owner marker of the job prefix `job_prefix` (with its trailing `/`), as an
/// operator of the cluster whose id is `cluster_id` would.
pub async fn put_owner_marker(
    job_prefix: &str,
    namespace: &str,
    name: &str,
    cluster_id: Option<&str>,
) {
    let marker = OwnerMarker {
        version: 1,
        cluster: None,
        cluster_id: cluster_id.map(str::to_string),
        namespace: namespace.into(),
        name: name.into(),
        uid: "uid-of-the-other-clusters-job".into(),
    };
    s3_client()
        .put_object()
        .bucket(support::s3_settings().bucket)
        .key(format!("{job_prefix}streamkeeper-job.json"))
        .body(ByteStream::from(marker.to_json()))
        .send()
        .await
        .unwrap();
}

/// The bytes of the test bucket's object `key`.
pub async fn object_bytes(key: &str) -> Vec<u8> {
    s3_client()
        .get_object()
        .bucket(support::s3_settings().bucket)
        .key(key)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes()
        .to_vec()
}

/// The owner marker of the job prefix `job_prefix` (with its trailing `/`).
pub async fn owner_marker(job_prefix: &str) -> OwnerMarker {
    OwnerMarker::from_json(&object_bytes(&format!("{job_prefix}streamkeeper-job.json")).await)
        .unwrap()
}
