//! Test jobs for the controller's unit tests: a realistic resource as the apiserver returns it
//! (defaults filled in, uid and generation set), and edits for the variants tests need.

use crate::api::{
    KafkaSaslSpec, KafkaTlsSpec, SaslMechanism, SecretKeyRef, StatefulStreamJob, WindowSpec,
    WindowType,
};
use crate::controller::build::Facts;
use crate::controller::valid_job::ValidatedJob;
use crate::controller::validate::validate;

pub const UID: &str = "7d0e5c1a-3f0b-4c55-9a52-1b2f5e6a7c80";

const JOB: &str = r#"
apiVersion: streamkeeper.dev/v1alpha1
kind: StatefulStreamJob
metadata:
  name: card-count
  namespace: payments
  uid: 7d0e5c1a-3f0b-4c55-9a52-1b2f5e6a7c80
  generation: 3
spec:
  image: streamkeeper/worker:0.1.0
  replicas: 3
  standbyReplicas: 1
  kafka:
    bootstrapServers: kafka-0.kafka:9092,kafka-1.kafka:9092
    inputTopic: card-transactions
    outputTopic: card-counts
    minInsyncReplicas: 2
    replicationFactor: 3
  processor:
    type: aggregate
    keyField: card
    timeField: ts
    aggregate:
      valueField: amount
  state:
    storageSize: 20Gi
    storageClassName: fast-ssd
    rocksdb:
      blockCacheSize: 256Mi
      writeBufferSize: 64Mi
  checkpoint:
    interval: 30s
    retain: 3
    s3:
      bucket: streamkeeper-checkpoints
      endpoint: http://seaweedfs-s3.storage.svc:8333
      pathStyle: true
      credentialsSecret:
        name: streamkeeper-s3
  resources:
    requests:
      cpu: 500m
      memory: 1Gi
    limits:
      memory: 2Gi
"#;

/// The job as read from the apiserver.
pub fn job() -> StatefulStreamJob {
    serde_yaml_ng::from_str(JOB).unwrap()
}

/// The job with `edit` applied.
pub fn job_with(edit: impl FnOnce(&mut StatefulStreamJob)) -> StatefulStreamJob {
    let mut job = job();
    edit(&mut job);
    job
}

pub fn validated() -> ValidatedJob {
    validate(&job(), None).unwrap()
}

pub fn validated_with(edit: impl FnOnce(&mut StatefulStreamJob)) -> ValidatedJob {
    validate(&job_with(edit), None).unwrap()
}

pub fn facts() -> Facts {
    Facts {
        tasks: 6,
        pods_kept: None,
    }
}

/// Mutual TLS from two Secrets and SCRAM credentials from a third.
pub fn with_kafka_security(job: &mut StatefulStreamJob) {
    let key = |name: &str, key: &str| SecretKeyRef {
        name: name.into(),
        key: key.into(),
    };
    job.spec.kafka.tls = Some(KafkaTlsSpec {
        ca: Some(key("kafka-ca", "ca.pem")),
        certificate: Some(key("kafka-client", "cert.pem")),
        private_key: Some(key("kafka-client", "key.pem")),
    });
    job.spec.kafka.sasl = Some(KafkaSaslSpec {
        mechanism: SaslMechanism::ScramSha512,
        secret_name: "kafka-user".into(),
        username_key: "user".into(),
        password_key: "pass".into(),
    });
}

/// One-hour windows starting every ten minutes, thirty seconds of grace.
pub fn with_hopping_window(job: &mut StatefulStreamJob) {
    if let Some(aggregate) = job.spec.processor.aggregate.as_mut() {
        aggregate.window = Some(WindowSpec {
            type_: WindowType::Hopping,
            size: "1h".into(),
            advance: Some("10m".into()),
            grace: "30s".into(),
        });
    }
}

/// A dedup processor with a one-day TTL.
pub fn with_dedup(job: &mut StatefulStreamJob) {
    job.spec.processor.type_ = crate::api::ProcessorType::Dedup;
    job.spec.processor.aggregate = None;
    job.spec.processor.dedup = Some(crate::api::DedupSpec { ttl: "24h".into() });
}

/// `value` as JSON, to compare with [`yaml`] fragments.
pub fn json<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap()
}

/// An inline YAML fragment as JSON.
pub fn yaml(text: &str) -> serde_json::Value {
    serde_yaml_ng::from_str(text).unwrap()
}
