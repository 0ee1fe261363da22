//! The rules behind [`super::validate`] for identity, workers, state, checkpoints and restores,
//! and the helpers every rule module uses. Each returns the resolved part or the first
//! [`InvalidSpec`] it finds, naming the field. A rule the worker applies too is the contract's
//! ([`rules`]), called here, never copied.

use super::{
    CheckpointSettings, InvalidSpec, RestorePoint, RestoreRequest, StateSettings, ValidatedJob,
    Workers, quantity_to_bytes,
};
use crate::api::{
    CheckpointSpec, Compression, RestoreSpec, S3CredentialsSecret, StateSpec, StatefulStreamJob,
    StatefulStreamJobSpec,
};
use crate::controller::build;
use crate::k8s::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use std::time::Duration;
use streamkeeper_contract::parse_go_duration;
use streamkeeper_contract::restore_request::adoption_refused;
use streamkeeper_contract::rules;
use streamkeeper_contract::worker_config::{self as contract, RocksDbTuning};

pub(super) fn identity(
    job: &StatefulStreamJob,
) -> Result<(String, String, OwnerReference), InvalidSpec> {
    let name = non_empty(
        "metadata.name",
        job.metadata.name.as_deref(),
        "every object has one",
    )?;
    rules::job_name(&name)?;
    let namespace = non_empty(
        "metadata.namespace",
        job.metadata.namespace.as_deref(),
        "the job is namespaced",
    )?;
    let uid = non_empty(
        "metadata.uid",
        job.metadata.uid.as_deref(),
        "owned objects point to the job by uid; read the job from the apiserver",
    )?;
    let owner = OwnerReference {
        api_version: StatefulStreamJob::api_version(&()).into_owned(),
        kind: StatefulStreamJob::kind(&()).into_owned(),
        name: name.clone(),
        uid,
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    Ok((namespace, name, owner))
}

pub(super) fn workers(spec: &StatefulStreamJobSpec) -> Result<Workers, InvalidSpec> {
    let image = non_empty("spec.image", Some(spec.image.as_str()), "the worker image")?;
    if spec.replicas < 1 {
        return Err(InvalidSpec::rule(
            "spec.replicas",
            format!(
                "{} is not at least 1; set spec.suspend to scale to zero",
                spec.replicas
            ),
        ));
    }
    let standby_replicas = u32::try_from(spec.standby_replicas).map_err(|_| {
        InvalidSpec::rule(
            "spec.standbyReplicas",
            format!("{} is negative", spec.standby_replicas),
        )
    })?;
    if spec.standby_replicas >= spec.replicas {
        return Err(InvalidSpec::rule(
            "spec.standbyReplicas",
            format!(
                "{} must be less than spec.replicas ({}): each standby of a task runs on a different pod than its active",
                spec.standby_replicas, spec.replicas
            ),
        ));
    }
    let pod = &spec.pod;
    if let Some(key) = pod
        .labels
        .keys()
        .find(|k| labels::RESERVED_LABELS.contains(&k.as_str()))
    {
        return Err(InvalidSpec::rule(
            format!("spec.pod.labels[{key:?}]"),
            "is set by the operator (the StatefulSet selector and the pod watch rely on it)",
        ));
    }
    if let Some(key) = pod
        .annotations
        .keys()
        .find(|k| labels::RESERVED_ANNOTATIONS.contains(&k.as_str()))
    {
        return Err(InvalidSpec::rule(
            format!("spec.pod.annotations[{key:?}]"),
            "is set by the operator (it decides when pods restart)",
        ));
    }
    let service_account = match &pod.service_account_name {
        Some(name) if name.is_empty() || name.len() > 253 || !is_dns_subdomain(name) => {
            return Err(InvalidSpec::rule(
                "spec.pod.serviceAccountName",
                format!("`{name}` is not a valid object name"),
            ));
        }
        name => name.clone(),
    };
    Ok(Workers {
        image,
        image_pull_policy: spec.image_pull_policy,
        replicas: spec.replicas,
        standby_replicas,
        suspend: spec.suspend,
        restart_nonce: spec.restart_nonce.clone(),
        resources: spec.resources.clone(),
        pod: pod.clone(),
        service_account,
    })
}

pub(super) fn state(spec: &StateSpec) -> Result<StateSettings, InvalidSpec> {
    let storage_bytes = bytes("spec.state.storageSize", &spec.storage_size.0)?;
    if storage_bytes == 0 {
        return Err(InvalidSpec::rule(
            "spec.state.storageSize",
            "must be more than 0",
        ));
    }
    let block_cache_bytes = bytes(
        "spec.state.rocksdb.blockCacheSize",
        &spec.rocksdb.block_cache_size.0,
    )?;
    let write_buffer_bytes = bytes(
        "spec.state.rocksdb.writeBufferSize",
        &spec.rocksdb.write_buffer_size.0,
    )?;
    let rocksdb = RocksDbTuning {
        block_cache_bytes,
        write_buffer_bytes,
        compression: match spec.rocksdb.compression {
            Compression::None => contract::Compression::None,
            Compression::Lz4 => contract::Compression::Lz4,
            Compression::Zstd => contract::Compression::Zstd,
        },
    };
    rules::rocksdb(&rocksdb)?;
    Ok(StateSettings {
        storage_size: spec.storage_size.clone(),
        storage_bytes,
        storage_class_name: spec.storage_class_name.clone(),
        rocksdb,
    })
}

pub(super) fn checkpoint(spec: &CheckpointSpec) -> Result<CheckpointSettings, InvalidSpec> {
    let interval = duration("spec.checkpoint.interval", &spec.interval)?;
    let retain = u32::try_from(spec.retain)
        .map_err(|_| InvalidSpec::rule("spec.checkpoint.retain", "must be at least 1"))?;
    rules::checkpoint(interval, retain)?;
    let s3 = &spec.s3;
    rules::s3_bucket(&s3.bucket)?;
    rules::s3_prefix(&s3.prefix)?;
    if let Some(endpoint) = &s3.endpoint
        && !(endpoint.starts_with("http://") || endpoint.starts_with("https://"))
    {
        return Err(InvalidSpec::rule(
            "spec.checkpoint.s3.endpoint",
            format!("`{endpoint}` is not an http:// or https:// URL"),
        ));
    }
    let region = non_empty(
        "spec.checkpoint.s3.region",
        Some(s3.region.as_str()),
        "S3 signs requests with it",
    )?;
    if let Some(secret) = &s3.credentials_secret {
        credentials_secret("spec.checkpoint.s3.credentialsSecret", secret)?;
    }
    Ok(CheckpointSettings {
        interval,
        retain,
        bucket: s3.bucket.clone(),
        prefix: s3.prefix.clone(),
        endpoint: s3.endpoint.clone(),
        region,
        path_style: s3.path_style,
        credentials: s3.credentials_secret.clone(),
    })
}

/// A Secret of S3 access keys at `path`: named, with two different keys.
pub(super) fn credentials_secret(
    path: &str,
    secret: &S3CredentialsSecret,
) -> Result<(), InvalidSpec> {
    non_empty(
        &format!("{path}.name"),
        Some(secret.name.as_str()),
        "the Secret",
    )?;
    non_empty(
        &format!("{path}.accessKeyIdKey"),
        Some(secret.access_key_id_key.as_str()),
        "a key of the Secret",
    )?;
    non_empty(
        &format!("{path}.secretAccessKeyKey"),
        Some(secret.secret_access_key_key.as_str()),
        "a key of the Secret",
    )?;
    if secret.access_key_id_key == secret.secret_access_key_key {
        return Err(InvalidSpec::rule(
            format!("{path}.secretAccessKeyKey"),
            "is the same key as accessKeyIdKey",
        ));
    }
    Ok(())
}

pub(super) fn restore(spec: &RestoreSpec) -> Result<RestoreRequest, InvalidSpec> {
    let id = non_empty(
        "spec.restore.id",
        Some(spec.id.as_str()),
        "a restore runs once per id",
    )?;
    let checkpoint = match spec.checkpoint.as_str() {
        "latest" => RestorePoint::Latest,
        text => text
            .parse()
            .ok()
            .filter(|_| text.bytes().all(|b| b.is_ascii_digit()))
            .map(RestorePoint::Sequence)
            .ok_or_else(|| {
                InvalidSpec::rule(
                    "spec.restore.checkpoint",
                    format!("`{text}` is neither `latest` nor a checkpoint sequence number"),
                )
            })?,
    };
    if let Some(reason) = adoption_refused(spec.adopt_input, spec.source.into()) {
        return Err(InvalidSpec::rule("spec.restore.adoptInput", reason));
    }
    Ok(RestoreRequest {
        id,
        checkpoint,
        source: spec.source,
        adopt_input: spec.adopt_input,
    })
}

pub(super) fn non_negative(field: &str, value: i64) -> Result<u64, InvalidSpec> {
    u64::try_from(value).map_err(|_| InvalidSpec::rule(field, format!("{value} is negative")))
}

/// The last check: the worker config rendered from this job passes every rule the worker
/// checks it with ([`rules::worker_config`]), so a job that validates never yields pods that
/// refuse their config. The parts above already ran most of them, field by field; this one
/// catches what only the rendered whole shows.
pub(super) fn worker_config_accepted(job: &ValidatedJob) -> Result<(), InvalidSpec> {
    Ok(rules::worker_config(&build::worker_config::render(job))?)
}

pub(super) fn non_empty(
    field: &str,
    value: Option<&str>,
    why: &'static str,
) -> Result<String, InvalidSpec> {
    match value.map(str::trim) {
        Some(value) if !value.is_empty() => Ok(value.to_string()),
        _ => Err(InvalidSpec::Missing {
            field: field.to_string(),
            why,
        }),
    }
}

/// `spec.recovery.heartbeatTimeout`: at least 1 s (4 polls, each allowed 500 ms to answer),
/// at most a minute (longer is the node controller's business).
pub(super) fn heartbeat_timeout(text: &str) -> Result<Duration, InvalidSpec> {
    let field = "spec.recovery.heartbeatTimeout";
    let timeout = duration(field, text)?;
    if !(Duration::from_secs(1)..=Duration::from_secs(60)).contains(&timeout) {
        return Err(InvalidSpec::rule(field, "must be between 1s and 60s"));
    }
    Ok(timeout)
}

pub(super) fn duration(field: &str, text: &str) -> Result<Duration, InvalidSpec> {
    parse_go_duration(text).map_err(|source| InvalidSpec::Duration {
        field: field.to_string(),
        source,
    })
}

pub(super) fn bytes(field: &str, text: &str) -> Result<u64, InvalidSpec> {
    quantity_to_bytes(text).map_err(|source| InvalidSpec::Quantity {
        field: field.to_string(),
        source,
    })
}

/// RFC 1123 subdomain: what most object names must be.
fn is_dns_subdomain(name: &str) -> bool {
    name.split('.').all(|part| {
        let bytes = part.as_bytes();
        !bytes.is_empty()
            && bytes[0].is_ascii_alphanumeric()
            && bytes[bytes.len() - 1].is_ascii_alphanumeric()
            && bytes
                .iter()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
    })
}
