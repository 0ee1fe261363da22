//! Step 1 of the pipeline (**validate** → read facts → build → apply → observe → judge → update
//! status): the raw `StatefulStreamJob` in, a [`ValidatedJob`] out.

mod join;
mod kafka;
mod processor;
mod quantity;
mod rules;

pub use quantity::{QuantityError, quantity_to_bytes};

use crate::controller::valid_job::{
    CheckpointSettings, KafkaSettings, ModuleConfigMap, RestorePoint, RestoreRequest,
    StateSettings, ValidatedJob, Workers,
};

use crate::api::StatefulStreamJob;
use crate::vocabulary::reasons;
use streamkeeper_contract::DurationError;
use streamkeeper_contract::rules::Violation;
use streamkeeper_contract::worker_config::JobIdentity;

/// A spec that breaks a rule, naming the field (`spec.processor.aggregate.window.advance`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InvalidSpec {
    #[error("{field} is required: {why}")]
    Missing { field: String, why: &'static str },
    #[error("{field}: {source}")]
    Duration {
        field: String,
        #[source]
        source: DurationError,
    },
    #[error("{field}: {source}")]
    Quantity {
        field: String,
        #[source]
        source: QuantityError,
    },
    #[error("{field}: {rule}")]
    Rule { field: String, rule: String },
}

impl InvalidSpec {
    /// The path of the offending field, as `kubectl explain` spells it.
    pub fn field(&self) -> &str {
        match self {
            InvalidSpec::Missing { field, .. }
            | InvalidSpec::Duration { field, .. }
            | InvalidSpec::Quantity { field, .. }
            | InvalidSpec::Rule { field, .. } => field,
        }
    }

    /// Stable name for the `Invalid` condition reason, the Event reason and the metric label.
    /// One value for every variant: which field is wrong is in the message, not the label, so
    /// the metric's cardinality stays fixed.
    pub fn category(&self) -> &'static str {
        reasons::INVALID_SPEC
    }

    pub(crate) fn rule(field: impl Into<String>, rule: impl Into<String>) -> Self {
        InvalidSpec::Rule {
            field: field.into(),
            rule: rule.into(),
        }
    }
}

/// A broken contract rule, named by its path in the spec.
impl From<Violation> for InvalidSpec {
    fn from(violation: Violation) -> Self {
        InvalidSpec::rule(violation.field.spec_path(), violation.reason)
    }
}

/// A rebuild from the input (`spec.restore.source: input`) reprocesses the input topic alone; a
/// join's state also holds what it read of its right topic, which such a rebuild would not read.
fn refuse_input_rebuild_of_a_join(job: &ValidatedJob) -> Result<(), InvalidSpec> {
    let rebuilds = job
        .restore
        .as_ref()
        .is_some_and(|restore| restore.source == crate::api::RestoreSource::Input);
    if rebuilds && job.processor.right_topic().is_some() {
        return Err(InvalidSpec::rule(
            "spec.restore.source",
            "input is not supported for a join (it would reprocess the input topic without the right topic); restore from the changelog",
        ));
    }
    Ok(())
}

/// Checks `job` and resolves everything the builders need, for an operator whose cluster name is
/// `cluster` (`--cluster-name`; part of every id and default name derived from the job). Stops
/// at the first broken rule: the user fixes one field at a time, and the message names it.
pub fn validate(
    job: &StatefulStreamJob,
    cluster: Option<&str>,
) -> Result<ValidatedJob, InvalidSpec> {
    let (namespace, name, owner) = rules::identity(job)?;
    let identity = JobIdentity {
        cluster: cluster.map(str::to_string),
        namespace: namespace.clone(),
        name: name.clone(),
    };
    let spec = &job.spec;
    let validated = ValidatedJob {
        generation: job.metadata.generation,
        owner,
        workers: rules::workers(spec)?,
        kafka: kafka::settings(&spec.kafka, &identity)?,
        processor: processor::config(&spec.processor, &identity)?,
        state: rules::state(&spec.state)?,
        checkpoint: rules::checkpoint(&spec.checkpoint)?,
        acceptable_recovery_lag: rules::non_negative(
            "spec.recovery.acceptableRecoveryLag",
            spec.recovery.acceptable_recovery_lag,
        )?,
        heartbeat_timeout: rules::heartbeat_timeout(&spec.recovery.heartbeat_timeout)?,
        restore: spec.restore.as_ref().map(rules::restore).transpose()?,
        deletion_policy: spec.deletion_policy,
        module_config_map: spec
            .processor
            .wasm
            .as_ref()
            .and_then(|wasm| wasm.module.config_map.as_ref())
            .map(|source| ModuleConfigMap {
                name: source.name.clone(),
                key: source.key.clone(),
            }),
        module_credentials: spec
            .processor
            .wasm
            .as_ref()
            .and_then(|wasm| wasm.module.credentials_secret.clone()),
        namespace,
        name,
        cluster: identity.cluster,
    };
    refuse_input_rebuild_of_a_join(&validated)?;
    rules::worker_config_accepted(&validated)?;
    Ok(validated)
}

#[cfg(test)]
mod tests;
