//! The owner markers of the job's S3 prefix and of its changelog, as the apply and the deletion
//! carry out the rules of [`streamkeeper_contract::owner_marker`]: claimed before any worker is
//! applied (so before any worker writes a checkpoint or a changelog record), and the prefix's
//! checked before its objects are deleted. A claim made or found is remembered with the job's
//! other verified objects ([`Context::verified`]), so later reconciles of the job read no marker,
//! and in the job's `status.ownerRecords`, so a new operator leader reads none either: its first
//! reconcile of a running job reaches the failover loop without a Kafka read of the changelog.

use crate::adapters::checkpoints::CheckpointReader;
use crate::adapters::kafka_admin::{KafkaAdmin, KafkaAdminError};
use crate::api::StatefulStreamJob;
use crate::api::status::OwnerRecords;
use crate::controller::apply::ApplyError;
use crate::controller::read_facts::checkpoint_reader;
use crate::controller::{Context, ReconcileError, ValidatedJob};
use crate::k8s::apply::ApiError;
use crate::k8s::ownership::ForeignObject;
use crate::k8s::status;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use streamkeeper_contract::owner_marker::{self as prefix, ChangelogClaim, PrefixClaim};
use streamkeeper_contract::{JobPrefix, OwnerMarker, Versioned};

/// The kinds the claims are remembered under among the job's verified objects.
const MARKER_KIND: &str = "S3 owner marker";
const CHANGELOG_KIND: &str = "changelog owner record";

/// This job's marker, as this operator writes it.
pub fn ours(ctx: &Context, job: &ValidatedJob) -> OwnerMarker {
    OwnerMarker {
        version: OwnerMarker::VERSION,
        cluster: job.cluster.clone(),
        cluster_id: ctx.settings.cluster_id.clone(),
        namespace: job.namespace.clone(),
        name: job.name.clone(),
        uid: job.owner.uid.clone(),
    }
}

/// The owner records the job's status says it holds.
pub fn recorded(job: &StatefulStreamJob) -> OwnerRecords {
    job.status
        .as_ref()
        .and_then(|status| status.owner_records.clone())
        .unwrap_or_default()
}

/// Claims the job's prefix: writes its marker when there is none (or its predecessor's), and
/// `Ok(Err)` naming the holder when another cluster's or job's marker is there. `recorded`: the
/// owner records the job's status names.
pub async fn claim(
    ctx: &Context,
    job: &ValidatedJob,
    recorded: &OwnerRecords,
) -> Result<Result<(), ForeignObject>, ReconcileError> {
    let key = JobPrefix::of(&job.checkpoint.prefix, &job.identity()).owner_marker_key();
    if ctx.verified.contains(&job.owner, MARKER_KIND, &key) {
        return Ok(Ok(()));
    }
    if recorded.checkpoint_marker.as_deref() == Some(key.as_str()) {
        ctx.verified.insert(&job.owner, MARKER_KIND, &key);
        return Ok(Ok(()));
    }
    let reader = checkpoint_reader(ctx, job).await?;
    let ours = ours(ctx, job);
    let found = reader.owner_marker().await?;
    match prefix::prefix_claim(found.as_ref(), &ours) {
        Ok(PrefixClaim::Held) => {}
        Ok(PrefixClaim::Write) => {
            ctx.leadership.check()?;
            reader.write_owner_marker(&ours).await?;
            tracing::info!(job = %job.name, namespace = %job.namespace, prefix = %reader.job_prefix(), "claimed the job's S3 prefix (owner marker written)");
        }
        Err(held_by) => {
            return Ok(Err(ForeignObject {
                kind: MARKER_KIND.into(),
                namespace: job.checkpoint.bucket.clone(),
                name: key,
                held_by,
            }));
        }
    }
    let held = OwnerRecords {
        checkpoint_marker: Some(key.clone()),
        ..OwnerRecords::default()
    };
    record_held(ctx, (&job.namespace, &job.name), &held).await?;
    ctx.verified.insert(&job.owner, MARKER_KIND, &key);
    Ok(Ok(()))
}

/// Adds `held` to the job's `status.ownerRecords`. A merge patch replaces only the fields
/// `held` names, so neither a concurrent status write nor an older status removes them.
async fn record_held(
    ctx: &Context,
    (namespace, job): (&str, &str),
    held: &OwnerRecords,
) -> Result<(), ApiError> {
    let fields = serde_json::json!({ "ownerRecords": held });
    let action = "record the owner records held in the status of";
    let writer = (&ctx.client, &ctx.status_writes);
    status::merge_status(writer, (namespace, job), fields, action).await
}

/// Deletes the job's checkpoints if the prefix's marker names exactly this job, then the
/// marker. Returns how many objects went, or why none did.
pub async fn delete_under_marker(
    ctx: &Context,
    job: &ValidatedJob,
    reader: &CheckpointReader,
) -> Result<Result<usize, String>, ReconcileError> {
    let found = reader.owner_marker().await?;
    if let Err(why) = prefix::may_delete_under(found.as_ref(), &ours(ctx, job)) {
        return Ok(Err(why));
    }
    ctx.leadership.check()?;
    let objects = reader.delete_all().await?;
    reader.delete_owner_marker().await?;
    Ok(Ok(objects + 1))
}

/// Claims the job's changelog `topic`: writes this job's owner record into an empty partition 0
/// and reads back which record came first (two clusters creating one changelog at once decide
/// alike); `Ok(Err)` names the holder when another cluster's or job's record is first. A
/// changelog with records but no owner record (older than owner records) is used as it is.
pub async fn claim_changelog(
    ctx: &Context,
    kafka: &KafkaAdmin,
    topic: &str,
    claimant: &ChangelogClaimant<'_>,
) -> Result<Result<(), ForeignObject>, ApplyError> {
    let verified = &ctx.verified;
    let ChangelogClaimant {
        owner,
        marker: ours,
        recorded,
    } = claimant;
    if verified.contains(owner, CHANGELOG_KIND, topic) {
        return Ok(Ok(()));
    }
    if *recorded == Some(topic) {
        verified.insert(owner, CHANGELOG_KIND, topic);
        return Ok(Ok(()));
    }
    match changelog_holder(kafka, topic, ours).await? {
        Some(held_by) => Ok(Err(ForeignObject {
            kind: CHANGELOG_KIND.into(),
            namespace: kafka.bootstrap().to_string(),
            name: topic.to_string(),
            held_by,
        })),
        None => {
            let held = OwnerRecords {
                changelog: Some(topic.to_string()),
                ..OwnerRecords::default()
            };
            record_held(ctx, (&ours.namespace, &ours.name), &held).await?;
            verified.insert(owner, CHANGELOG_KIND, topic);
            Ok(Ok(()))
        }
    }
}

/// The job claiming a changelog: its owner reference, its owner record, and the changelog its
/// status records it holds.
pub struct ChangelogClaimant<'a> {
    pub owner: &'a OwnerReference,
    pub marker: &'a OwnerMarker,
    pub recorded: Option<&'a str>,
}

/// Reads the changelog's owner record, writing ours into an empty partition 0 and reading back
/// which record came first. Returns who holds it when that is not this job.
async fn changelog_holder(
    kafka: &KafkaAdmin,
    topic: &str,
    ours: &OwnerMarker,
) -> Result<Option<String>, KafkaAdminError> {
    let head = kafka.changelog_head(topic).await?;
    let held_by = match prefix::changelog_claim(head.first_owner.as_ref(), head.empty, ours) {
        Ok(ChangelogClaim::Held) => None,
        Ok(ChangelogClaim::Unclaimed) => {
            tracing::info!(namespace = %ours.namespace, job = %ours.name, %topic, "the changelog holds records but no owner record (created before owner records, or by hand): used as it is");
            None
        }
        Ok(ChangelogClaim::Write) => {
            kafka.write_changelog_owner(topic, ours).await?;
            let head = kafka.changelog_head(topic).await?;
            let first = prefix::changelog_claim(head.first_owner.as_ref(), head.empty, ours);
            if first.is_ok() {
                tracing::info!(namespace = %ours.namespace, job = %ours.name, %topic, "claimed the job's changelog (owner record written)");
            }
            first.err()
        }
        Err(held_by) => Some(held_by),
    };
    Ok(held_by)
}
