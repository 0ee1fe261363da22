//! The owner marker of the job's S3 prefix, as the apply and the deletion carry out the rules of
//! [`streamkeeper_contract::owner_marker`]: claimed before anything is applied (so before any worker
//! writes a checkpoint there), and checked before the prefix's objects are deleted. A claim
//! made or found is remembered with the job's other verified objects ([`Context::verified`]),
//! so later reconciles of the job read no marker.

use crate::adapters::checkpoints::CheckpointReader;
use crate::controller::read_facts::checkpoint_reader;
use crate::controller::{Context, ReconcileError, ValidatedJob};
use crate::k8s::ownership::ForeignObject;
use streamkeeper_contract::owner_marker::{self as prefix, PrefixClaim};
use streamkeeper_contract::{JobPrefix, OwnerMarker, Versioned};

/// The kind the claim is remembered under among the job's verified objects.
const MARKER_KIND: &str = "S3 owner marker";

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

/// Claims the job's prefix: writes its marker when there is none (or its predecessor's), and
/// `Ok(Err)` naming the holder when another cluster's or job's marker is there.
pub async fn claim(
    ctx: &Context,
    job: &ValidatedJob,
) -> Result<Result<(), ForeignObject>, ReconcileError> {
    let key = JobPrefix::of(&job.checkpoint.prefix, &job.identity()).owner_marker_key();
    if ctx.verified.contains(&job.owner, MARKER_KIND, &key) {
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
    ctx.verified.insert(&job.owner, MARKER_KIND, &key);
    Ok(Ok(()))
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
