//! The read-facts step of the pipeline: what the job's Kafka cluster says about its input topic
//! (partitions and retention), and the admin client the later steps reuse. Whether the
//! retention is acceptable is judged in [`crate::controller::judge`], not here.

use crate::controller::{Context, ReconcileError, ValidatedJob};
use crate::kafka_admin::{KafkaAdmin, KafkaAdminError};
use crate::kafka_security::KafkaClientSecurity;
use crate::retention::{RetentionViolation, TopicRetention};

/// The facts a reconcile reads from Kafka before it builds anything.
pub struct KafkaFacts {
    /// The job's admin client, with its TLS and SASL settings.
    pub admin: KafkaAdmin,
    pub input_partitions: i32,
    /// The input's `retention.ms` and `retention.bytes`, or the config that makes no sense.
    pub input_retention: Result<TopicRetention, RetentionViolation>,
}

/// Reads the input topic's partitions and retention. An error means the cluster (or the input
/// topic) could not be reached; the reconcile reports it and backs off.
pub async fn read_kafka(ctx: &Context, job: &ValidatedJob) -> Result<KafkaFacts, ReconcileError> {
    let admin = kafka_for_job(ctx, job).await?;
    let input = admin.topic(&job.kafka.input_topic).await?.ok_or_else(|| {
        KafkaAdminError::InputTopicMissing {
            bootstrap: admin.bootstrap().to_string(),
            topic: job.kafka.input_topic.clone(),
        }
    })?;
    let config = |key: &str| input.config.get(key).map(String::as_str);
    let input_retention =
        TopicRetention::from_topic_config(config("retention.ms"), config("retention.bytes"));
    Ok(KafkaFacts {
        input_partitions: input.partitions,
        input_retention,
        admin,
    })
}

/// The job's Kafka admin client, with the TLS and SASL settings its Secrets hold.
pub(crate) async fn kafka_for_job(
    ctx: &Context,
    job: &ValidatedJob,
) -> Result<KafkaAdmin, ReconcileError> {
    let security = KafkaClientSecurity::read(
        &ctx.client,
        &job.namespace,
        job.kafka.tls.as_ref(),
        job.kafka.sasl.as_ref(),
    )
    .await?;
    Ok(ctx
        .kafka
        .for_cluster(&job.kafka.bootstrap_servers, security.as_ref())?)
}
