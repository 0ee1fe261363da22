//! A WebAssembly processor's component: fetched from S3 with the job's checkpoint endpoint and
//! credentials once per worker, checked against the digest the job pins, and kept on the state
//! volume (`<state.dir>/modules/<sha256>.wasm`) so a restarted pod does not fetch it again.
//! A copy on the volume is checked like a fetched one: bytes that do not match are never run.

use super::error::CheckpointError;
use super::s3::S3Storage;
use std::path::{Path, PathBuf};
use streamkeeper_contract::module_digest::ModuleDigest;
use streamkeeper_contract::worker_config::{S3Config, WasmModuleSource};

/// Why the job's component cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    #[error("the job's WebAssembly module {location} needs S3 settings (spec.checkpoint.s3)")]
    NoS3 { location: String },
    #[error("cannot fetch the job's WebAssembly module {location}: {source}")]
    Fetch {
        location: String,
        #[source]
        source: CheckpointError,
    },
    #[error(
        "the job's WebAssembly module {location} has SHA-256 {found}, but the job pins {expected}: refusing to run it"
    )]
    Mismatch {
        location: String,
        expected: String,
        found: String,
    },
    #[error("cannot keep the module at {path}: {source}")]
    Cache {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `s3://bucket/key` of `source`, for messages.
pub fn location(source: &WasmModuleSource, s3: Option<&S3Config>) -> String {
    source.location(s3.map(|s3| s3.bucket.as_str()))
}

/// The component's bytes, checked against `source.sha256`: from the state volume's copy, else
/// from S3 (then kept on the volume).
pub async fn fetch(
    source: &WasmModuleSource,
    s3: Option<&S3Config>,
    state_dir: &Path,
) -> Result<Vec<u8>, ModuleError> {
    let location = location(source, s3);
    let cached = state_dir
        .join("modules")
        .join(format!("{}.wasm", source.sha256));
    if let Ok(bytes) = tokio::fs::read(&cached).await
        && ModuleDigest::of(&bytes) == source.sha256
    {
        return Ok(bytes);
    }
    let s3 = s3.ok_or_else(|| ModuleError::NoS3 {
        location: location.clone(),
    })?;
    let config = S3Config {
        bucket: source.bucket_or(&s3.bucket).to_string(),
        ..s3.clone()
    };
    let fetched = async {
        S3Storage::connect(&config)
            .await?
            .get_bytes(&source.key)
            .await
    };
    let bytes = fetched.await.map_err(|source| ModuleError::Fetch {
        location: location.clone(),
        source,
    })?;
    let found = ModuleDigest::of(&bytes);
    if found != source.sha256 {
        return Err(ModuleError::Mismatch {
            location,
            expected: source.sha256.clone(),
            found,
        });
    }
    keep(&cached, &bytes).await?;
    Ok(bytes)
}

/// Writes `bytes` to `path` whole or not at all (a temporary file, then a rename).
async fn keep(path: &Path, bytes: &[u8]) -> Result<(), ModuleError> {
    let cache = |source| ModuleError::Cache {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(cache)?;
    }
    let temporary = path.with_extension("wasm.tmp");
    tokio::fs::write(&temporary, bytes).await.map_err(cache)?;
    tokio::fs::rename(&temporary, path).await.map_err(cache)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(sha256: &str) -> WasmModuleSource {
        WasmModuleSource {
            bucket: None,
            key: "guests/velocity.wasm".into(),
            sha256: sha256.into(),
        }
    }

    #[tokio::test]
    async fn a_kept_copy_is_used_only_when_it_matches_the_pinned_digest() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = b"\0asm component".to_vec();
        let digest = ModuleDigest::of(&bytes);
        let kept = dir.path().join("modules").join(format!("{digest}.wasm"));
        keep(&kept, &bytes).await.unwrap();
        assert_eq!(
            fetch(&source(&digest), None, dir.path()).await.unwrap(),
            bytes
        );
        // Tampered with on the volume: not run, and with no S3 to fetch it again, refused.
        std::fs::write(&kept, b"other bytes").unwrap();
        let error = fetch(&source(&digest), None, dir.path()).await.unwrap_err();
        assert!(matches!(error, ModuleError::NoS3 { .. }), "{error}");
        assert!(
            error.to_string().contains("s3://?/guests/velocity.wasm"),
            "{error}"
        );
    }
}
