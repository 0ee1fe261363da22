//! Downloading one checkpoint into a local directory for a restore: every file in parallel,
//! each checked against the manifest's size and SHA-256 while it streams in. Any missing or
//! mismatching object fails the whole download (the caller falls back to an older checkpoint);
//! a partial directory is never installed.

use super::error::CheckpointError;
use super::files::hex;
use super::s3::S3Storage;
use super::upload::read_manifest;
use crate::failpoint;
use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use streamkeeper_contract::CheckpointManifest;
use streamkeeper_contract::checkpoint_layout::TaskPrefix;

/// Files downloaded at once.
pub const DOWNLOAD_CONCURRENCY: usize = 8;

/// Every readable manifest of the task. Unreadable ones are logged and skipped.
pub async fn list_manifests(
    storage: &S3Storage,
    prefix: &TaskPrefix,
) -> Result<Vec<CheckpointManifest>, CheckpointError> {
    let listed = storage.list(&prefix.manifests()).await?;
    let keys: Vec<String> = listed
        .into_iter()
        .filter(|o| prefix.sequence_of(&o.key).is_some())
        .map(|o| o.key)
        .collect();
    let read: Vec<Result<CheckpointManifest, CheckpointError>> = futures::stream::iter(keys)
        .map(|key| async move { read_manifest(storage, &key).await })
        .buffer_unordered(DOWNLOAD_CONCURRENCY)
        .collect()
        .await;
    let mut manifests = Vec::new();
    for result in read {
        match result {
            Ok(manifest) => manifests.push(manifest),
            Err(error @ CheckpointError::BadManifest { .. }) => {
                tracing::warn!(%error, "skipping an unreadable checkpoint manifest");
            }
            // A manifest deleted by GC between the listing and the read.
            Err(CheckpointError::S3 {
                status: Some(404), ..
            }) => {}
            Err(other) => return Err(other),
        }
    }
    Ok(manifests)
}

/// Downloads every file of `manifest` into `dir` (created; must not exist), adding each
/// received byte to `bytes_done`.
pub async fn download(
    storage: &S3Storage,
    manifest: &CheckpointManifest,
    dir: &Path,
    bytes_done: Arc<AtomicU64>,
) -> Result<(), CheckpointError> {
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(CheckpointError::io("create download directory", dir))?;
    let sequence = manifest.sequence;
    // Owned items: the futures run on a spawned task and must not borrow.
    futures::stream::iter(manifest.files.clone())
        .map(|file| {
            let bytes_done = Arc::clone(&bytes_done);
            let storage = storage.clone();
            let dir = dir.to_path_buf();
            async move {
                let path = dir.join(&file.name);
                let bad = |reason: String| CheckpointError::BadObject {
                    sequence,
                    key: file.object_key.clone(),
                    reason,
                };
                let mut out =
                    std::fs::File::create(&path).map_err(CheckpointError::io("create", &path))?;
                let mut hasher = Sha256::new();
                let mut size = 0u64;
                let received = storage
                    .get_streamed(&file.object_key, |chunk| {
                        hasher.update(chunk);
                        size += chunk.len() as u64;
                        bytes_done.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        out.write_all(chunk)
                            .map_err(CheckpointError::io("write", &path))
                    })
                    .await;
                match received {
                    Ok(()) => {}
                    Err(CheckpointError::S3 {
                        status: Some(404), ..
                    }) => return Err(bad("missing in S3".into())),
                    Err(other) => return Err(other),
                }
                if size != file.size {
                    return Err(bad(format!(
                        "{size} bytes, the manifest says {}",
                        file.size
                    )));
                }
                let sha256 = hex(&hasher.finalize());
                if sha256 != file.sha256 {
                    return Err(bad(format!(
                        "checksum {sha256} differs from the manifest's {}",
                        file.sha256
                    )));
                }
                out.sync_all().map_err(CheckpointError::io("sync", &path))?;
                failpoint::hit("mid-download");
                Ok(())
            }
        })
        .buffer_unordered(DOWNLOAD_CONCURRENCY)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}
