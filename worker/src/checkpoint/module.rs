//! A WebAssembly processor's component: read from its file (a ConfigMap the pod mounts), or
//! fetched from S3 with the job's checkpoint endpoint and credentials once per worker and kept
//! on the state volume (`<state.dir>/modules/<sha256>.wasm`) so a restarted pod does not fetch
//! it again; either way checked against the digest the job pins.
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
    #[error("cannot read the job's WebAssembly module {location}: {source}")]
    Read {
        location: String,
        #[source]
        source: std::io::Error,
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

/// The component's bytes, checked against `source.sha256`: from its file (a mounted
/// ConfigMap), or from the state volume's copy, else from S3 (then kept on the volume).
pub async fn fetch(
    source: &WasmModuleSource,
    s3: Option<&S3Config>,
    state_dir: &Path,
) -> Result<Vec<u8>, ModuleError> {
    let location = location(source, s3);
    if let Some(file) = &source.file {
        let bytes = tokio::fs::read(file)
            .await
            .map_err(|source| ModuleError::Read {
                location: location.clone(),
                source,
            })?;
        return checked(bytes, source, location);
    }
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
        credentials_dir: source
            .credentials_dir
            .as_ref()
            .map(PathBuf::from)
            .or_else(|| s3.credentials_dir.clone()),
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
    let bytes = checked(bytes, source, location)?;
    keep(&cached, &bytes).await?;
    Ok(bytes)
}

/// `bytes`, when they are the ones `source` pins.
fn checked(
    bytes: Vec<u8>,
    source: &WasmModuleSource,
    location: String,
) -> Result<Vec<u8>, ModuleError> {
    let found = ModuleDigest::of(&bytes);
    if found != source.sha256 {
        return Err(ModuleError::Mismatch {
            location,
            expected: source.sha256.clone(),
            found,
        });
    }
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
            file: None,
            credentials_dir: None,
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

    #[tokio::test]
    async fn a_file_is_read_and_checked_against_the_pinned_digest() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = b"\0asm component".to_vec();
        let file = dir.path().join("module.wasm");
        std::fs::write(&file, &bytes).unwrap();
        let mut from_file = source(&ModuleDigest::of(&bytes));
        from_file.key = String::new();
        from_file.file = Some(file.to_string_lossy().into_owned());
        assert_eq!(fetch(&from_file, None, dir.path()).await.unwrap(), bytes);
        from_file.sha256 = "0".repeat(64);
        assert!(matches!(
            fetch(&from_file, None, dir.path()).await,
            Err(ModuleError::Mismatch { .. })
        ));
        from_file.file = Some(dir.path().join("absent").to_string_lossy().into_owned());
        assert!(matches!(
            fetch(&from_file, None, dir.path()).await,
            Err(ModuleError::Read { .. })
        ));
    }
}
