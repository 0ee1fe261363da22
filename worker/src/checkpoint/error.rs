//! Why a checkpoint or a checkpoint restore failed. Every variant carries what was being done
//! and on which key or path; none carries a credential.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("s3: {op} {key}: {message}")]
    S3 {
        op: &'static str,
        key: String,
        /// The SDK's error chain, flattened (it may name the endpoint, never the secret).
        message: String,
        /// HTTP status when the server answered.
        status: Option<u16>,
    },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("s3 credentials in {path}: {reason}")]
    Credentials { path: PathBuf, reason: String },
    #[error("local state: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("manifest {key}: {reason}")]
    BadManifest { key: String, reason: String },
    #[error("object {key} of checkpoint {sequence}: {reason}")]
    BadObject {
        sequence: u64,
        key: String,
        reason: String,
    },
    #[error("{0}")]
    Internal(String),
}

impl CheckpointError {
    pub fn io(op: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| CheckpointError::Io { op, path, source }
    }

    /// Stable label for metrics and logs.
    pub fn category(&self) -> &'static str {
        match self {
            CheckpointError::S3 { .. } => "s3",
            CheckpointError::Io { .. } => "io",
            CheckpointError::Credentials { .. } => "credentials",
            CheckpointError::Store(_) => "store",
            CheckpointError::BadManifest { .. } => "bad_manifest",
            CheckpointError::BadObject { .. } => "bad_object",
            CheckpointError::Internal(_) => "internal",
        }
    }
}
