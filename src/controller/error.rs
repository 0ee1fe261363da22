//! A reconcile that failed, typed by where it failed; `category()` is the word the status, the
//! Events and the metrics use for it.

use crate::adapters::checkpoints::CheckpointReadError;
use crate::adapters::kafka_admin::KafkaAdminError;
use crate::adapters::kafka_security::KafkaSecretError;
use crate::k8s::apply::ApiError;
use crate::k8s::ownership::ForeignObject;
use crate::k8s::worker_token::WorkerTokenError;
use crate::leader::NotLeading;
use crate::vocabulary::reasons;
use kube::runtime::finalizer;

/// A reconcile that failed; the controller requeues it with backoff.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Api(Box<ApiError>),
    #[error(transparent)]
    Kafka(#[from] KafkaAdminError),
    #[error(transparent)]
    Checkpoints(#[from] CheckpointReadError),
    #[error(transparent)]
    KafkaCredentials(#[from] KafkaSecretError),
    #[error("S3 credentials Secret {namespace}/{name}: {reason}")]
    S3Credentials {
        namespace: String,
        name: String,
        reason: String,
    },
    #[error("StatefulStreamJob {0} has no namespace")]
    NoNamespace(String),
    #[error(transparent)]
    Finalizer(Box<finalizer::Error<ReconcileError>>),
    #[error(transparent)]
    NotLeading(#[from] NotLeading),
    #[error(transparent)]
    WorkerToken(#[from] WorkerTokenError),
    #[error(transparent)]
    Foreign(#[from] ForeignObject),
}

impl ReconcileError {
    /// Stable label for metrics and Events (the condition reasons' words).
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Api(_) | ReconcileError::NoNamespace(_) => reasons::API_ERROR,
            ReconcileError::Kafka(error) => error.category(),
            ReconcileError::Checkpoints(error) => error.category(),
            ReconcileError::S3Credentials { .. } => reasons::S3_UNAVAILABLE,
            ReconcileError::KafkaCredentials(_) => reasons::KAFKA_CREDENTIALS,
            ReconcileError::NotLeading(_) => reasons::NOT_LEADING,
            ReconcileError::WorkerToken(error) => error.category(),
            ReconcileError::Foreign(_) => reasons::FOREIGN_OBJECT,
            ReconcileError::Finalizer(error) => match error.as_ref() {
                finalizer::Error::ApplyFailed(inner) | finalizer::Error::CleanupFailed(inner) => {
                    inner.category()
                }
                _ => reasons::API_ERROR,
            },
        }
    }
}

impl From<ApiError> for ReconcileError {
    fn from(error: ApiError) -> Self {
        ReconcileError::Api(Box::new(error))
    }
}

/// Why the apply step stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Api(#[from] ApiError),
    /// An object with the job's derived name that is not the job's: nothing more is applied.
    #[error(transparent)]
    Foreign(#[from] ForeignObject),
    #[error(transparent)]
    Kafka(#[from] KafkaAdminError),
    #[error(transparent)]
    WorkerToken(#[from] WorkerTokenError),
}

impl From<ApplyError> for ReconcileError {
    fn from(error: ApplyError) -> Self {
        match error {
            ApplyError::Api(error) => error.into(),
            ApplyError::Kafka(error) => ReconcileError::Kafka(error),
            ApplyError::WorkerToken(WorkerTokenError::Api(error)) => ReconcileError::Api(error),
            ApplyError::WorkerToken(error) => ReconcileError::WorkerToken(error),
            ApplyError::Foreign(foreign) => ReconcileError::Foreign(foreign),
        }
    }
}
