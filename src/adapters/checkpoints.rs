//! Reading a job's checkpoints in S3, for the status (each task's manifests, of which the
//! contract's rule picks the one a restore would use) and for `deletionPolicy: Delete`. The worker writes them; the operator never
//! writes a checkpoint, it only reads manifests and, on request, deletes the job's prefix.
//!
//! Keys come from the contract's [`TaskPrefix`], manifests are parsed with the contract's
//! [`CheckpointManifest`], so the two sides cannot disagree about the layout.

use super::manifest_cache::{Listed, ManifestCache};
use crate::vocabulary::reasons;
use aws_sdk_s3::Client;
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use futures::StreamExt;
use std::sync::Arc;
use streamkeeper_contract::manifest::{MAX_MANIFEST_BYTES, append_bounded};
use streamkeeper_contract::worker_config::JobIdentity;
use streamkeeper_contract::{CheckpointManifest, JobPrefix, OwnerMarker, TaskPrefix, Versioned};

/// Manifests read at once per task (the worker's restore reads as many).
const MANIFEST_READS_AT_ONCE: usize = 8;

/// A failed S3 request. `category()` is the condition reason and the metric label.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointReadError {
    #[error("S3 bucket {bucket} did not answer {operation} under {prefix}: {message}")]
    Unavailable {
        bucket: String,
        operation: &'static str,
        prefix: String,
        message: String,
    },
}

impl CheckpointReadError {
    pub fn category(&self) -> &'static str {
        reasons::S3_UNAVAILABLE
    }
}

/// Access keys read from the job's credentials Secret; ambient AWS credentials when absent.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct S3AccessKeys {
    pub access_key_id: String,
    pub secret_access_key: String,
}

/// Where a job's checkpoints are: the bucket, the key prefix and how to reach the S3 server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    pub prefix: String,
    pub endpoint: Option<String>,
    pub region: String,
    pub path_style: bool,
}

/// Counts each request sent to S3, by operation: the caller's metrics (the operator's
/// `streamkeeper_operator_s3_requests_total`).
pub type CountS3Request = Arc<dyn Fn(&'static str) + Send + Sync>;

/// The checkpoints of one job.
pub struct CheckpointReader {
    client: Client,
    /// Endpoint, bucket and prefix: where the kept manifests were listed.
    location: String,
    bucket: String,
    prefix: String,
    job: JobIdentity,
    /// Counts every request sent to S3, by operation.
    count: CountS3Request,
}

impl CheckpointReader {
    /// The reader of `job`'s checkpoints at `settings`, through `client` (one for that server
    /// and the job's credentials, [`super::s3_clients`]).
    pub fn new(
        settings: S3Location,
        client: Client,
        job: JobIdentity,
        count: CountS3Request,
    ) -> Self {
        Self {
            client,
            location: format!(
                "{}|{}|{}",
                settings.endpoint.as_deref().unwrap_or("aws"),
                settings.bucket,
                settings.prefix
            ),
            bucket: settings.bucket,
            prefix: settings.prefix,
            job,
            count,
        }
    }

    fn job(&self) -> JobPrefix {
        JobPrefix::of(&self.prefix, &self.job)
    }

    fn task(&self, task: u32) -> TaskPrefix {
        self.job().task(task)
    }

    /// `<prefix>/[<cluster>/]<namespace>/<job>/`: everything the job's workers wrote.
    pub fn job_prefix(&self) -> String {
        self.job().as_str().to_string()
    }

    fn unavailable(
        &self,
        operation: &'static str,
        prefix: &str,
        error: impl std::error::Error,
    ) -> CheckpointReadError {
        CheckpointReadError::Unavailable {
            bucket: self.bucket.clone(),
            operation,
            prefix: prefix.to_string(),
            message: aws_sdk_s3::error::DisplayErrorContext(error).to_string(),
        }
    }

    /// Every object under `prefix`, in lexical order of keys.
    async fn list(&self, prefix: &str) -> Result<Vec<Listed>, CheckpointReadError> {
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            (self.count)("ListObjectsV2");
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| self.unavailable("ListObjectsV2", prefix, e))?;
            keys.extend(page.contents().iter().filter_map(|object| {
                Some(Listed {
                    key: object.key()?.to_string(),
                    etag: object.e_tag().map(str::to_string),
                })
            }));
            token = page.next_continuation_token().map(str::to_string);
            if token.is_none() {
                keys.sort_by(|a, b| a.key.cmp(&b.key));
                return Ok(keys);
            }
        }
    }

    /// Every readable manifest of `task`, in no particular order; which one a restore would use is the contract's rule
    /// ([`streamkeeper_contract::checkpoint_choice`]), judged by the caller. A manifest that does
    /// not parse, or has a version this operator does not know, is skipped as restore skips it;
    /// one deleted between the listing and the read (the workers' retention) is skipped too.
    /// Retention bounds how many there are (`checkpoint.retain`). The listing is read every
    /// time; of the manifests, only those `kept` does not hold as listed now
    /// ([`super::manifest_cache`]).
    pub async fn manifests(
        &self,
        task: u32,
        kept: &ManifestCache,
    ) -> Result<Vec<CheckpointManifest>, CheckpointReadError> {
        let prefix = self.task(task);
        let listed: Vec<Listed> = self
            .list(&prefix.manifests())
            .await?
            .into_iter()
            .filter(|object| prefix.sequence_of(&object.key).is_some())
            .collect();
        let job = format!("{}/{}", self.job.namespace, self.job.name);
        let scope = (job.as_str(), self.location.as_str(), task);
        let read: Vec<Result<(Listed, Option<CheckpointManifest>), CheckpointReadError>> =
            futures::stream::iter(kept.to_read(scope, &listed))
                .map(|object| async move {
                    let manifest = self.manifest(&object.key).await?;
                    Ok((object, manifest))
                })
                .buffer_unordered(MANIFEST_READS_AT_ONCE)
                .collect()
                .await;
        let read = read.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(kept.record(scope, &listed, read))
    }

    /// The manifest at `key`; `None` when it is gone or does not parse.
    async fn manifest(&self, key: &str) -> Result<Option<CheckpointManifest>, CheckpointReadError> {
        let Some(bytes) = self.read_small(key).await? else {
            return Ok(None);
        };
        match CheckpointManifest::from_json(&bytes) {
            Ok(manifest) => Ok(Some(manifest)),
            Err(error) => {
                tracing::warn!(key, %error, "skipping a checkpoint manifest that does not parse");
                Ok(None)
            }
        }
    }

    /// The object at `key`, if it exists and is no larger than a manifest may be (a larger one
    /// is logged and read as absent).
    async fn read_small(&self, key: &str) -> Result<Option<Vec<u8>>, CheckpointReadError> {
        (self.count)("GetObject");
        let object = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(object) => object,
            Err(error) if error.as_service_error().is_some_and(|e| e.is_no_such_key()) => {
                return Ok(None);
            }
            Err(error) => return Err(self.unavailable("GetObject", key, error)),
        };
        // Read up to the limit, never further: the bucket is the job author's, and one large
        // object under a manifest's name must not cost the operator (every job's) memory.
        let too_large = || {
            tracing::warn!(
                key,
                limit = MAX_MANIFEST_BYTES,
                "skipping an object under a manifest's or marker's name that is larger than either"
            );
            Ok(None)
        };
        if object
            .content_length()
            .is_some_and(|n| n > MAX_MANIFEST_BYTES as i64)
        {
            return too_large();
        }
        let mut body = object.body;
        let mut bytes = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| self.unavailable("GetObject", key, e))?;
            if !append_bounded(&mut bytes, &chunk) {
                return too_large();
            }
        }
        Ok(Some(bytes))
    }

    /// The job prefix's owner marker: `None` when there is none, an error naming the key when
    /// one is there but unreadable (never taken for no marker: it may be another cluster's).
    pub async fn owner_marker(
        &self,
    ) -> Result<Option<Result<OwnerMarker, String>>, CheckpointReadError> {
        let key = self.job().owner_marker_key();
        let Some(bytes) = self.read_small(&key).await? else {
            return Ok(None);
        };
        Ok(Some(
            OwnerMarker::from_json(&bytes).map_err(|error| format!("{key}: {error}")),
        ))
    }

    /// Writes `marker` as the job prefix's owner marker.
    pub async fn write_owner_marker(
        &self,
        marker: &OwnerMarker,
    ) -> Result<(), CheckpointReadError> {
        let key = self.job().owner_marker_key();
        (self.count)("PutObject");
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .content_type("application/json")
            .body(marker.to_json().into())
            .send()
            .await
            .map_err(|e| self.unavailable("PutObject", &key, e))?;
        Ok(())
    }

    /// Deletes the job prefix's owner marker, the last object of a deleted job.
    pub async fn delete_owner_marker(&self) -> Result<(), CheckpointReadError> {
        let key = self.job().owner_marker_key();
        (self.count)("DeleteObject");
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| self.unavailable("DeleteObject", &key, e))?;
        Ok(())
    }

    /// Deletes every object the job's tasks wrote under its prefix ([`JobPrefix::owns`]);
    /// returns how many were deleted.
    pub async fn delete_all(&self) -> Result<usize, CheckpointReadError> {
        let job = self.job();
        let prefix = self.job_prefix();
        // Only the keys the job's tasks write: another job's folder may lie below this prefix.
        let keys: Vec<String> = self
            .list(&prefix)
            .await?
            .into_iter()
            .map(|object| object.key)
            .filter(|key| job.owns(key))
            .collect();
        // DeleteObjects takes at most 1000 keys per request.
        for chunk in keys.chunks(1000) {
            let objects = chunk
                .iter()
                .map(|key| ObjectIdentifier::builder().key(key).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.unavailable("DeleteObjects", &prefix, e))?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(|e| self.unavailable("DeleteObjects", &prefix, e))?;
            (self.count)("DeleteObjects");
            self.client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .await
                .map_err(|e| self.unavailable("DeleteObjects", &prefix, e))?;
        }
        Ok(keys.len())
    }
}
