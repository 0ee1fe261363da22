//! Bench: restore of a large RocksDB state from an S3 checkpoint (download with every SHA-256
//! verified, then install) next to a plain download of the same objects with the same client
//! and concurrency — the limit of this machine and S3 server. Also reports the upload.
//!
//! Needs the real S3 server (`tests/services/s3.sh start`, its `env` exported). Run:
//! `cargo bench --workspace --bench checkpoint_restore` (BENCH_STATE_MB, default 1100).
//! Prints the figures and writes them as JSON to `$BENCH_OUT` (default
//! `target/bench/checkpoint-restore.json` under the cargo target directory).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

use futures::StreamExt;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;
use streamkeeper_contract::checkpoint_layout::TaskPrefix;
use streamkeeper_contract::worker_config::{RocksDbTuning, S3Config};
use streamkeeper_worker::checkpoint::download::{DOWNLOAD_CONCURRENCY, download};
use streamkeeper_worker::checkpoint::s3::S3Storage;
use streamkeeper_worker::checkpoint::upload::{ManifestIdentity, Snapshot, TaskUploader};
use streamkeeper_worker::store::{ChangeSet, OpenOutcome, RocksStore, StateStore, TaskMetadata};

const VALUE_BYTES: usize = 4096;

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} not set: export `tests/services/s3.sh env`"))
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let state_mb: u64 = std::env::var("BENCH_STATE_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1100);
    let work =
        tempfile::tempdir_in(std::env::var("BENCH_DIR").unwrap_or_else(|_| "/tmp".into())).unwrap();
    let credentials = work.path().join("credentials");
    std::fs::create_dir_all(&credentials).unwrap();
    std::fs::write(credentials.join("accessKeyId"), env("SK_S3_ACCESS_KEY")).unwrap();
    std::fs::write(credentials.join("secretAccessKey"), env("SK_S3_SECRET_KEY")).unwrap();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let s3 = S3Config {
        bucket: env("SK_S3_BUCKET"),
        prefix: format!("bench-{nanos:x}"),
        endpoint: Some(env("SK_S3_ENDPOINT")),
        region: env("SK_S3_REGION"),
        path_style: true,
        credentials_dir: Some(credentials),
    };
    let storage = S3Storage::connect(&s3).await.unwrap();
    let prefix = TaskPrefix::new(&s3.prefix, "bench", "restore", 0);

    // 1. A state of `state_mb` MB of incompressible values.
    let state_dir = work.path().join("state");
    let started = Instant::now();
    let opened = RocksStore::open(&state_dir, 0, &RocksDbTuning::default()).unwrap();
    let mut store = opened.store;
    let entries = state_mb * 1024 * 1024 / VALUE_BYTES as u64;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut meta = TaskMetadata::initial(0);
    let mut changes = ChangeSet::new();
    for index in 0..entries {
        let mut value = vec![0u8; VALUE_BYTES];
        for chunk in value.chunks_mut(8) {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            chunk.copy_from_slice(&seed.to_le_bytes()[..chunk.len()]);
        }
        changes.set(format!("k{index:012}").into_bytes(), Some(value));
        if changes.len() == 1000 || index + 1 == entries {
            meta.next_input_offset = i64::try_from(index + 1).unwrap();
            meta.next_changelog_offset = i64::try_from(index + 1).unwrap();
            store.commit(&changes, &meta).unwrap();
            changes = ChangeSet::new();
        }
    }
    store.flush().unwrap();
    eprintln!(
        "state written: {entries} entries in {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // 2. Checkpoint and upload.
    let snapshot_dir = work.path().join("snapshot");
    let started = Instant::now();
    let info = store.checkpoint(&snapshot_dir).unwrap();
    let snapshot_seconds = started.elapsed().as_secs_f64();
    let snapshot = Snapshot {
        dir: snapshot_dir,
        metadata: info.metadata.unwrap(),
        file_names: info.files.iter().map(|f| f.name.clone()).collect(),
        changelog_incarnation: None,
    };
    let mut uploader = TaskUploader::new(
        storage.clone(),
        prefix.clone(),
        0,
        ManifestIdentity {
            owner: "bench".into(),
            assignment_generation: 0,
            processor_kind: "count".into(),
            state_format_version: 1,
        },
    );
    let started = Instant::now();
    let uploaded = uploader.upload(&snapshot).await.unwrap();
    let upload_seconds = started.elapsed().as_secs_f64();
    let manifest = uploaded.manifest;
    let total = manifest.total_bytes();
    drop(store);

    // 3. Restore: download with verification, then install into an empty store.
    let restore_dir = work.path().join("restore-state");
    let download_dir = work.path().join("restore-download");
    let started = Instant::now();
    download(
        &storage,
        &manifest,
        &download_dir,
        Arc::new(AtomicU64::new(0)),
    )
    .await
    .unwrap();
    let download_seconds = started.elapsed().as_secs_f64();
    let mut restored = RocksStore::open(&restore_dir, 0, &RocksDbTuning::default())
        .unwrap()
        .store;
    let outcome = restored.install_checkpoint(&download_dir).unwrap();
    let restore_seconds = started.elapsed().as_secs_f64();
    assert!(
        matches!(outcome, OpenOutcome::Valid(m) if m == meta),
        "{outcome:?}"
    );
    drop(restored);

    // 4. Plain download of the same objects, same client and concurrency, no verification.
    let plain_dir = work.path().join("plain");
    std::fs::create_dir_all(&plain_dir).unwrap();
    let started = Instant::now();
    futures::stream::iter(manifest.files.clone())
        .map(|file| {
            let storage = storage.clone();
            let path = plain_dir.join(&file.name);
            async move {
                let mut out = std::fs::File::create(&path).unwrap();
                storage
                    .get_streamed(&file.object_key, |chunk| {
                        out.write_all(chunk).unwrap();
                        Ok(())
                    })
                    .await
                    .unwrap();
                out.sync_all().unwrap();
            }
        })
        .buffer_unordered(DOWNLOAD_CONCURRENCY)
        .collect::<Vec<()>>()
        .await;
    let plain_seconds = started.elapsed().as_secs_f64();

    // Clean the bench prefix.
    for object in storage.list(&format!("{}/", s3.prefix)).await.unwrap() {
        storage.delete(&object.key).await.unwrap();
    }

    let figures = serde_json::json!({
        "bench": "checkpoint-restore",
        "state_bytes": total,
        "files": manifest.files.len(),
        "concurrency": DOWNLOAD_CONCURRENCY,
        "local_checkpoint_seconds": snapshot_seconds,
        "upload_seconds": upload_seconds,
        "upload_mb_per_second": mb(total) / upload_seconds,
        "restore_download_verified_seconds": download_seconds,
        "restore_total_seconds": restore_seconds,
        "restore_mb_per_second": mb(total) / restore_seconds,
        "plain_download_seconds": plain_seconds,
        "plain_download_mb_per_second": mb(total) / plain_seconds,
        "restore_vs_plain_ratio": plain_seconds / restore_seconds,
    });
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
    let out = std::env::var("BENCH_OUT").unwrap_or_else(|_| {
        let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
        format!("{target}/bench/checkpoint-restore.json")
    });
    if let Some(parent) = std::path::Path::new(&out).parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&out, serde_json::to_vec_pretty(&figures).unwrap()).unwrap();
    eprintln!("written to {out}");
}
