//! Reading a job's checkpoints in S3, for the status (each task's manifests, of which the
//! contract's rule picks the one a restore would use) and for `deletionPolicy: Delete`. The worker writes them; the operator never
//! writes a checkpoint, it only reads manifests and, on request, deletes the job's prefix.
//!
//! Keys come from the contract's [`TaskPrefix`], manifests are parsed with the contract's
//! [`CheckpointManifest`], so the two sides cannot disagree about the layout.

use crate::vocabulary::reasons;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::types::{Delete, ObjectIdentifier};
use futures::StreamExt;
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
#[derive(Clone)]
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

/// The checkpoints of one job.
pub struct CheckpointReader {
    client: Client,
    bucket: String,
    prefix: String,
    job: JobIdentity,
}

/// An S3 client for `settings`' server, with `keys`, or the ambient AWS credentials when
/// there are none: what the operator reads a job's objects with (checkpoints, its module).
pub async fn s3_client(settings: &S3Location, keys: Option<S3AccessKeys>) -> Client {
    let mut config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(settings.region.clone()))
        .force_path_style(settings.path_style);
    if let Some(endpoint) = &settings.endpoint {
        config = config.endpoint_url(endpoint);
    }
    config = match keys {
        Some(keys) => config.credentials_provider(Credentials::new(
            keys.access_key_id,
            keys.secret_access_key,
            None,
            None,
            "streamkeeper-job-secret",
        )),
        None => {
            let ambient = aws_config::defaults(BehaviorVersion::latest()).load().await;
            match ambient.credentials_provider() {
                Some(provider) => config.credentials_provider(provider),
                None => config,
            }
        }
    };
    Client::from_conf(config.build())
}

impl CheckpointReader {
    pub async fn new(settings: S3Location, keys: Option<S3AccessKeys>, job: JobIdentity) -> Self {
        Self {
            client: s3_client(&settings, keys).await,
            bucket: settings.bucket,
            prefix: settings.prefix,
            job,
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

    /// Every key under `prefix`, in lexical order.
    async fn list(&self, prefix: &str) -> Result<Vec<String>, CheckpointReadError> {
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| self.unavailable("ListObjectsV2", prefix, e))?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|object| object.key().map(str::to_string)),
            );
            token = page.next_continuation_token().map(str::to_string);
            if token.is_none() {
                keys.sort();
                return Ok(keys);
            }
        }
    }

    /// Every readable manifest of `task`, in no particular order; which one a restore would use
    /// is the contract's rule ([`streamkeeper_contract::checkpoint_choice`]), judged by the
    /// caller. A manifest that does not parse, or has a version this operator does not know, is
    /// skipped as restore skips it; one deleted between the listing and the read (the workers'
    /// retention) is skipped too. Retention bounds how many there are (`checkpoint.retain`).
    pub async fn manifests(
        &self,
        task: u32,
    ) -> Result<Vec<CheckpointManifest>, CheckpointReadError> {
        let prefix = self.task(task);
        let keys: Vec<String> = self
            .list(&prefix.manifests())
            .await?
            .into_iter()
            .filter(|key| prefix.sequence_of(key).is_some())
            .collect();
        let read: Vec<Result<Option<CheckpointManifest>, CheckpointReadError>> =
            futures::stream::iter(keys)
                .map(|key| async move { self.manifest(&key).await })
                .buffer_unordered(MANIFEST_READS_AT_ONCE)
                .collect()
                .await;
        let mut manifests = Vec::new();
        for manifest in read {
            manifests.extend(manifest?);
        }
        Ok(manifests)
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
