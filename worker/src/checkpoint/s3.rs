//! The S3 client of the checkpoints: built from the worker config (endpoint, region, path-style
//! addressing for S3 servers other than AWS; credentials from a mounted Secret directory or the
//! standard AWS chain) and the few object operations checkpoints need. Credentials are read
//! here and handed to the SDK only; nothing in this module logs or formats them.

use super::error::CheckpointError;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, Length};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use futures::{StreamExt, TryStreamExt};
use std::path::Path;
use std::time::Duration;
use streamkeeper_contract::worker_config::S3Config;

/// Files above this size are uploaded in parts, several at once.
pub const MULTIPART_THRESHOLD: u64 = 32 << 20;
/// Part size of multipart uploads (S3 wants at least 5 MiB for all parts but the last).
pub const PART_BYTES: u64 = 16 << 20;
/// Parts of one file uploaded at once.
const PART_CONCURRENCY: usize = 4;

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    pub key: String,
    pub size: u64,
}

/// The checkpoint bucket.
#[derive(Clone, Debug)]
pub struct S3Storage {
    client: Client,
    bucket: String,
}

impl S3Storage {
    /// A client for `config`. Reads the credentials files when `credentialsDir` is set.
    pub async fn connect(config: &S3Config) -> Result<Self, CheckpointError> {
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(Duration::from_secs(60))
            .operation_attempt_timeout(Duration::from_secs(120))
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .timeout_config(timeouts)
            .retry_config(RetryConfig::standard().with_max_attempts(3));
        if let Some(dir) = &config.credentials_dir {
            loader = loader.credentials_provider(credentials_from_dir(dir)?);
        }
        let shared = loader.load().await;
        let mut builder =
            aws_sdk_s3::config::Builder::from(&shared).force_path_style(config.path_style);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        Ok(Self {
            client: Client::from_conf(builder.build()),
            bucket: config.bucket.clone(),
        })
    }

    /// Every object below `prefix`, in key order.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ListedObject>, CheckpointError> {
        let pages: Vec<_> = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .into_paginator()
            .send()
            .try_collect()
            .await
            .map_err(|e| s3_error("list", prefix, e))?;
        let mut objects: Vec<ListedObject> = pages
            .iter()
            .flat_map(|page| page.contents())
            .filter_map(|object| {
                Some(ListedObject {
                    key: object.key()?.to_string(),
                    size: object
                        .size()
                        .and_then(|s| u64::try_from(s).ok())
                        .unwrap_or(0),
                })
            })
            .collect();
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(objects)
    }

    /// The whole object (small ones only: a reader of manifests bounds them, see
    /// `upload::read_manifest`).
    pub async fn get_bytes(&self, key: &str) -> Result<Vec<u8>, CheckpointError> {
        let output = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| s3_error("get", key, e))?;
        let bytes = output
            .body
            .collect()
            .await
            .map_err(|e| stream_error("get", key, &e))?;
        Ok(bytes.to_vec())
    }

    /// Streams the object to `on_chunk` as it arrives.
    pub async fn get_streamed(
        &self,
        key: &str,
        mut on_chunk: impl FnMut(&[u8]) -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        let mut body = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| s3_error("get", key, e))?
            .body;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| stream_error("get", key, &e))?;
            on_chunk(&chunk)?;
        }
        Ok(())
    }

    /// Writes `bytes` to `key` only if no object has that key (`If-None-Match: *`).
    /// Returns `false` when the key already existed (nothing was written).
    pub async fn put_if_absent(&self, key: &str, bytes: Vec<u8>) -> Result<bool, CheckpointError> {
        match self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type("application/json")
            .if_none_match("*")
            .body(ByteStream::from(bytes))
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(error) if status_of(&error) == Some(412) => Ok(false),
            Err(error) => Err(s3_error("conditional put", key, error)),
        }
    }

    /// Uploads the file at `path` (`size` bytes) to `key`; in parallel parts when it is large.
    pub async fn put_file(&self, key: &str, path: &Path, size: u64) -> Result<(), CheckpointError> {
        if size > MULTIPART_THRESHOLD {
            return self.put_multipart(key, path, size).await;
        }
        let body = ByteStream::from_path(path)
            .await
            .map_err(|e| CheckpointError::Internal(format!("reading {}: {e}", path.display())))?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(body)
            .send()
            .await
            .map_err(|e| s3_error("put", key, e))?;
        Ok(())
    }

    async fn put_multipart(
        &self,
        key: &str,
        path: &Path,
        size: u64,
    ) -> Result<(), CheckpointError> {
        let upload = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| s3_error("create multipart upload", key, e))?;
        let upload_id = upload
            .upload_id()
            .ok_or_else(|| CheckpointError::S3 {
                op: "create multipart upload",
                key: key.into(),
                message: "no upload id in the answer".into(),
                status: None,
            })?
            .to_string();
        let parts = size.div_ceil(PART_BYTES);
        let uploaded: Result<Vec<CompletedPart>, CheckpointError> = futures::stream::iter(0..parts)
            .map(|index| self.put_part(key, &upload_id, path, size, index))
            .buffer_unordered(PART_CONCURRENCY)
            .try_collect()
            .await;
        let mut parts = match uploaded {
            Ok(parts) => parts,
            Err(error) => {
                // An unfinished upload is invisible but costs storage until aborted.
                let _ = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(key)
                    .upload_id(&upload_id)
                    .send()
                    .await;
                return Err(error);
            }
        };
        parts.sort_by_key(|part| part.part_number());
        self.client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(&upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| s3_error("complete multipart upload", key, e))?;
        Ok(())
    }

    async fn put_part(
        &self,
        key: &str,
        upload_id: &str,
        path: &Path,
        size: u64,
        index: u64,
    ) -> Result<CompletedPart, CheckpointError> {
        let offset = index * PART_BYTES;
        let length = PART_BYTES.min(size - offset);
        let body = ByteStream::read_from()
            .path(path)
            .offset(offset)
            .length(Length::Exact(length))
            .build()
            .await
            .map_err(|e| CheckpointError::Internal(format!("reading {}: {e}", path.display())))?;
        let part_number = i32::try_from(index + 1)
            .map_err(|_| CheckpointError::Internal(format!("{key}: too many parts")))?;
        let answer = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(part_number)
            .body(body)
            .send()
            .await
            .map_err(|e| s3_error("upload part", key, e))?;
        Ok(CompletedPart::builder()
            .set_e_tag(answer.e_tag().map(str::to_string))
            .part_number(part_number)
            .build())
    }

    pub async fn delete(&self, key: &str) -> Result<(), CheckpointError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| s3_error("delete", key, e))?;
        Ok(())
    }
}

/// Static credentials from a mounted Secret: files `accessKeyId` and `secretAccessKey`.
fn credentials_from_dir(dir: &Path) -> Result<Credentials, CheckpointError> {
    let read = |name: &str| {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).map_err(|e| CheckpointError::Credentials {
            path: path.clone(),
            reason: format!("cannot read: {e}"),
        })?;
        let value = text.trim().to_string();
        if value.is_empty() {
            return Err(CheckpointError::Credentials {
                path,
                reason: "is empty".into(),
            });
        }
        Ok(value)
    };
    Ok(Credentials::new(
        read("accessKeyId")?,
        read("secretAccessKey")?,
        None,
        None,
        "streamkeeper-credentials-dir",
    ))
}

fn status_of<E, R>(error: &SdkError<E, R>) -> Option<u16>
where
    R: HttpStatus,
{
    error.raw_response().map(HttpStatus::status_code)
}

/// The HTTP status of a raw SDK response.
trait HttpStatus {
    fn status_code(&self) -> u16;
}

impl HttpStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

fn s3_error<E>(
    op: &'static str,
    key: &str,
    error: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> CheckpointError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    let status = status_of(&error);
    let message = match error.as_service_error() {
        Some(service) => format!(
            "{} ({})",
            service.code().unwrap_or("unknown code"),
            service.message().unwrap_or("no message")
        ),
        None => error_chain(&error),
    };
    CheckpointError::S3 {
        op,
        key: key.into(),
        message,
        status,
    }
}

fn stream_error(op: &'static str, key: &str, error: &dyn std::error::Error) -> CheckpointError {
    CheckpointError::S3 {
        op,
        key: key.into(),
        message: error_chain(error),
        status: None,
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
