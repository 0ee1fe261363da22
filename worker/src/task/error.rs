//! Why a task attempt failed, and what the supervisor does about it.

use crate::kafka_client::KafkaSetupError;
use crate::processor::ProcessError;
use crate::store::StoreError;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("kafka: {context}: {source}")]
    Kafka {
        context: &'static str,
        #[source]
        source: KafkaError,
    },
    #[error("another owner took over this task: {0}")]
    Fenced(String),
    /// The coordinator aborted the open transaction for its timeout (see `fence`): retried
    /// from the committed state, not a fence.
    #[error("transaction timed out: {0}")]
    TransactionTimedOut(String),
    #[error("local state: {0}")]
    Store(#[from] StoreError),
    #[error("processor: {0}")]
    Process(#[from] ProcessError),
    #[error("kafka client setup: {0}")]
    Setup(#[from] KafkaSetupError),
    #[error("changelog: {0}")]
    Changelog(String),
    #[error("checkpoint restore: {0}")]
    Checkpoint(#[from] crate::checkpoint::CheckpointError),
    /// The changelog holds less than the task's state says it wrote (the topic was deleted or
    /// recreated). The task never guesses: only a restore request with `source: input` goes on.
    #[error("changelog lost: {0}")]
    ChangelogLost(String),
    /// The state and the input disagree in a way no start position repairs (see
    /// `input_position`). The task never guesses: it stops with the reason and the way on.
    #[error("input position: {0}")]
    InputPosition(String),
    /// The state was built by another processor config (see `identity`).
    #[error("processor mismatch: {0}")]
    ProcessorMismatch(String),
    /// The state was built from another input topic, or another incarnation of this one (see
    /// `input_identity`).
    #[error("input mismatch: {0}")]
    InputMismatch(String),
    #[error("reading the input topic's id: {0}")]
    InputTopicId(#[from] streamkeeper_kafka_topic_id::TopicIdError),
    /// The role was asked to stop (its assignment changed, or the worker shuts down) during a
    /// long phase, which ended early; the state is as a crash there would leave it.
    #[error("stopped while {0}: the task's role changed or the worker shuts down")]
    Stopped(String),
    /// A consumer stopped delivering records the broker holds (see `consumer_watch`): retried
    /// with a new consumer.
    #[error("consumer stalled: {0}")]
    ConsumerStalled(String),
    /// A join's two topics no longer have as many partitions (one got more after the job
    /// started): records of one key now meet in different tasks, so the task stops rather than
    /// join them wrongly.
    #[error("partitions changed: {0}")]
    PartitionsChanged(String),
    /// A re-keyed join side's topic got partitions: retried, reading them too.
    #[error("sources changed: {0}")]
    SourcesChanged(String),
    #[error("{0}")]
    Internal(String),
}

impl TaskError {
    /// Wraps a Kafka error, recognising fencing (a newer owner with our `transactional.id`).
    pub fn kafka(context: &'static str, source: KafkaError) -> Self {
        let fenced = matches!(
            source.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::Fenced
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch
            )
        );
        if fenced {
            TaskError::Fenced(format!("{context}: {source}"))
        } else {
            TaskError::Kafka { context, source }
        }
    }

    /// Stable label for metrics and events.
    /// Every [`TaskError::category`], so the metrics can start each at 0 (a new variant's
    /// category missing here only appears at its first error, as any label did before).
    pub const CATEGORIES: [&'static str; 17] = [
        "kafka",
        "fenced",
        "transaction_timeout",
        "store",
        "processor",
        "setup",
        "changelog",
        "checkpoint",
        "changelog_lost",
        "input_position",
        "processor_mismatch",
        "input_mismatch",
        "stopped",
        "consumer_stalled",
        "partitions_changed",
        "sources_changed",
        "internal",
    ];

    pub fn category(&self) -> &'static str {
        match self {
            TaskError::Kafka { .. } => "kafka",
            TaskError::Fenced(_) => "fenced",
            TaskError::TransactionTimedOut(_) => "transaction_timeout",
            TaskError::Store(_) => "store",
            TaskError::Process(_) => "processor",
            TaskError::Setup(_) => "setup",
            TaskError::Changelog(_) => "changelog",
            TaskError::Checkpoint(_) => "checkpoint",
            TaskError::ChangelogLost(_) => "changelog_lost",
            TaskError::InputPosition(_) => "input_position",
            TaskError::ProcessorMismatch(_) => "processor_mismatch",
            TaskError::InputMismatch(_) => "input_mismatch",
            TaskError::InputTopicId(_) => "kafka",
            TaskError::Stopped(_) => "stopped",
            TaskError::ConsumerStalled(_) => "consumer_stalled",
            TaskError::PartitionsChanged(_) => "partitions_changed",
            TaskError::SourcesChanged(_) => "sources_changed",
            TaskError::Internal(_) => "internal",
        }
    }

    /// Store errors may leave the engine in a bad state: reopen it (and re-check it) on retry.
    pub fn requires_reopen(&self) -> bool {
        matches!(
            self,
            TaskError::Store(_) | TaskError::Changelog(_) | TaskError::Checkpoint(_)
        )
    }
}
