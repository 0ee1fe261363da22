//! Uploading one task's checkpoints: every file of a local RocksDB checkpoint not yet in S3 is
//! uploaded under its content hash, then the manifest is written with `If-None-Match: *` — the
//! commit point. A failure anywhere before the manifest leaves at most unreferenced objects
//! (collected later), never a visible checkpoint. Also runs the retention plan of [`super::gc`].

use super::error::CheckpointError;
use super::files::{HashCache, LocalFile};
use super::gc::{self, ListedManifest, UnreferencedSince};
use super::s3::S3Storage;
use crate::failpoint;
use crate::store::TaskMetadata;
use futures::{StreamExt, TryStreamExt};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use streamkeeper_contract::checkpoint_layout::TaskPrefix;
use streamkeeper_contract::{CheckpointFile, CheckpointManifest, Versioned};

/// Files uploaded at once.
const UPLOAD_CONCURRENCY: usize = 8;

/// A local RocksDB checkpoint waiting to be uploaded.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub dir: PathBuf,
    pub metadata: TaskMetadata,
    pub file_names: Vec<String>,
    /// The changelog incarnation the state belongs to (`None`: the topic as first created).
    pub changelog_incarnation: Option<String>,
}

/// What the manifest says besides the files.
#[derive(Debug, Clone)]
pub struct ManifestIdentity {
    pub owner: String,
    pub assignment_generation: u64,
    pub processor_kind: String,
    pub state_format_version: u32,
}

/// A durable checkpoint and what writing it cost.
#[derive(Debug, Clone)]
pub struct Uploaded {
    pub manifest: CheckpointManifest,
    pub uploaded_bytes: u64,
    pub uploaded_files: usize,
}

/// Retention settings.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub retain: usize,
    pub grace: Duration,
}

/// What one GC run deleted.
#[derive(Debug, Clone, Copy, Default)]
pub struct GcOutcome {
    pub manifests: usize,
    pub objects: usize,
}

/// One task's uploader. Used by one checkpoint at a time.
#[derive(Debug)]
pub struct TaskUploader {
    storage: S3Storage,
    prefix: TaskPrefix,
    task: u32,
    identity: ManifestIdentity,
    /// Object keys known to exist in S3: from a listing, then from our own uploads and GC.
    known: Option<HashSet<String>>,
    next_sequence: u64,
    hashes: HashCache,
    /// Parsed manifests by key (manifests never change once written).
    manifest_refs: HashMap<String, Option<BTreeSet<String>>>,
    unreferenced: UnreferencedSince,
}

impl TaskUploader {
    pub fn new(
        storage: S3Storage,
        prefix: TaskPrefix,
        task: u32,
        identity: ManifestIdentity,
    ) -> Self {
        Self {
            storage,
            prefix,
            task,
            identity,
            known: None,
            next_sequence: 0,
            hashes: HashCache::default(),
            manifest_refs: HashMap::new(),
            unreferenced: UnreferencedSince::default(),
        }
    }

    /// Lists what S3 holds for the task, once: the objects (so only new ones are uploaded)
    /// and the manifests (so the next sequence number is free). Returns the newest manifest.
    pub async fn discover(&mut self) -> Result<Option<CheckpointManifest>, CheckpointError> {
        if self.known.is_some() {
            return Ok(None);
        }
        let objects = self.storage.list(&self.prefix.objects()).await?;
        let manifests = self.storage.list(&self.prefix.manifests()).await?;
        let newest = manifests
            .iter()
            .filter_map(|m| self.prefix.sequence_of(&m.key).map(|s| (s, m.key.clone())))
            .max();
        self.next_sequence = newest.as_ref().map_or(0, |(s, _)| s + 1);
        self.known = Some(objects.into_iter().map(|o| o.key).collect());
        let newest = match newest {
            Some((_, key)) => read_manifest(&self.storage, &key).await.ok(),
            None => None,
        };
        tracing::info!(
            task = self.task,
            next_sequence = self.next_sequence,
            known_objects = self.known.as_ref().map_or(0, HashSet::len),
            "checkpoint storage discovered"
        );
        Ok(newest)
    }

    /// Uploads `snapshot` and writes its manifest. Returns once the checkpoint is durable.
    pub async fn upload(&mut self, snapshot: &Snapshot) -> Result<Uploaded, CheckpointError> {
        self.discover().await?;
        let files = self.describe(snapshot).await?;
        let known = self.known.get_or_insert_with(HashSet::new);
        let mut missing: Vec<(String, LocalFile)> = Vec::new();
        let mut seen = HashSet::new();
        for file in &files {
            let key = self.prefix.object_key(&file.sha256);
            if !known.contains(&key) && seen.insert(key.clone()) {
                missing.push((key, file.clone()));
            }
        }
        // Owned items: the futures run on a spawned task and must not borrow.
        let uploaded: Vec<(String, u64)> = futures::stream::iter(missing)
            .map(|(key, file)| {
                let storage = self.storage.clone();
                async move {
                    storage.put_file(&key, &file.path, file.size).await?;
                    failpoint::hit("mid-upload");
                    Ok::<_, CheckpointError>((key, file.size))
                }
            })
            .buffer_unordered(UPLOAD_CONCURRENCY)
            .try_collect()
            .await?;
        let uploaded_bytes = uploaded.iter().map(|(_, size)| size).sum();
        let uploaded_files = uploaded.len();
        known.extend(uploaded.into_iter().map(|(key, _)| key));

        let mut manifest = self.manifest(snapshot, &files);
        // Another owner may have taken a sequence number: never overwrite, take the next.
        loop {
            let key = self.prefix.manifest_key(manifest.sequence);
            if self.storage.put_if_absent(&key, manifest.to_json()).await? {
                failpoint::hit("after-manifest-write");
                self.next_sequence = manifest.sequence + 1;
                let refs = manifest
                    .files
                    .iter()
                    .map(|f| f.object_key.clone())
                    .collect();
                self.manifest_refs.insert(key, Some(refs));
                break;
            }
            tracing::warn!(
                task = self.task,
                sequence = manifest.sequence,
                "checkpoint sequence already taken (another owner?); using the next one"
            );
            manifest.sequence += 1;
        }
        Ok(Uploaded {
            manifest,
            uploaded_bytes,
            uploaded_files,
        })
    }

    /// The manifest of `snapshot`, whose files are `files`, under the next sequence number.
    fn manifest(&self, snapshot: &Snapshot, files: &[LocalFile]) -> CheckpointManifest {
        let meta = snapshot.metadata;
        CheckpointManifest {
            version: CheckpointManifest::VERSION,
            task: self.task,
            sequence: self.next_sequence,
            owner: self.identity.owner.clone(),
            assignment_generation: self.identity.assignment_generation,
            created_at_ms: now_ms(),
            input_offset: meta.next_input_offset,
            changelog_offset: meta.next_changelog_offset,
            newest_record_ms: meta
                .newest_changelog_timestamp_ms
                .and_then(|ms| u64::try_from(ms).ok())
                .unwrap_or(0),
            processor_kind: self.identity.processor_kind.clone(),
            state_format_version: self.identity.state_format_version,
            changelog_incarnation: snapshot.changelog_incarnation.clone(),
            files: files
                .iter()
                .map(|f| CheckpointFile {
                    name: f.name.clone(),
                    object_key: self.prefix.object_key(&f.sha256),
                    size: f.size,
                    sha256: f.sha256.clone(),
                })
                .collect(),
        }
    }

    /// Sizes and hashes of the snapshot's files, on a blocking thread (only new SSTs are read).
    async fn describe(&mut self, snapshot: &Snapshot) -> Result<Vec<LocalFile>, CheckpointError> {
        let mut cache = std::mem::take(&mut self.hashes);
        let dir = snapshot.dir.clone();
        let names = snapshot.file_names.clone();
        let (cache, described) = tokio::task::spawn_blocking(move || {
            let described: Result<Vec<LocalFile>, CheckpointError> = names
                .iter()
                .map(|name| cache.describe(&dir, name).map(|(file, _)| file))
                .collect();
            let live: HashSet<String> = names.into_iter().collect();
            cache.retain_names(&live);
            (cache, described)
        })
        .await
        .map_err(|e| CheckpointError::Internal(format!("hashing: {e}")))?;
        self.hashes = cache;
        described
    }

    /// Deletes manifests beyond `retain` and objects unreferenced for the grace period.
    pub async fn collect_garbage(
        &mut self,
        retention: Retention,
    ) -> Result<GcOutcome, CheckpointError> {
        let listed = self.storage.list(&self.prefix.manifests()).await?;
        let mut manifests = Vec::new();
        for object in &listed {
            let Some(sequence) = self.prefix.sequence_of(&object.key) else {
                continue;
            };
            let references = match self.manifest_refs.get(&object.key) {
                Some(refs) => refs.clone(),
                None => {
                    let refs = match read_manifest(&self.storage, &object.key).await {
                        Ok(m) => Some(m.files.into_iter().map(|f| f.object_key).collect()),
                        Err(CheckpointError::BadManifest { reason, .. }) => {
                            tracing::warn!(task = self.task, key = %object.key, %reason, "unreadable checkpoint manifest");
                            None
                        }
                        Err(other) => return Err(other),
                    };
                    self.manifest_refs.insert(object.key.clone(), refs.clone());
                    refs
                }
            };
            manifests.push(ListedManifest {
                key: object.key.clone(),
                sequence,
                references,
            });
        }
        let objects = self.storage.list(&self.prefix.objects()).await?;
        let plan = gc::plan(
            &manifests,
            &objects,
            retention.retain,
            &mut self.unreferenced,
            Instant::now(),
            retention.grace,
        );
        // Manifests first: an object is only ever deleted after every manifest naming it.
        for key in &plan.manifests {
            self.storage.delete(key).await?;
            self.manifest_refs.remove(key);
        }
        for key in &plan.objects {
            self.storage.delete(key).await?;
            if let Some(known) = self.known.as_mut() {
                known.remove(key);
            }
        }
        if !plan.manifests.is_empty() || !plan.objects.is_empty() {
            tracing::info!(
                task = self.task,
                manifests = plan.manifests.len(),
                objects = plan.objects.len(),
                "checkpoint garbage collected"
            );
        }
        Ok(GcOutcome {
            manifests: plan.manifests.len(),
            objects: plan.objects.len(),
        })
    }
}

/// Reads and checks one manifest.
pub async fn read_manifest(
    storage: &S3Storage,
    key: &str,
) -> Result<CheckpointManifest, CheckpointError> {
    use streamkeeper_contract::manifest::{MAX_MANIFEST_BYTES, append_bounded};
    let mut bytes = Vec::new();
    storage
        .get_streamed(key, |chunk| {
            if append_bounded(&mut bytes, chunk) {
                return Ok(());
            }
            Err(CheckpointError::BadManifest {
                key: key.into(),
                reason: format!("larger than {MAX_MANIFEST_BYTES} bytes: not a manifest"),
            })
        })
        .await?;
    CheckpointManifest::from_json(&bytes).map_err(|e| CheckpointError::BadManifest {
        key: key.into(),
        reason: e.to_string(),
    })
}

pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
