//! The join part of [`super::processor`]: the spec's join settings as the contract's
//! [`ProcessorKind::Join`], whose rules ([`streamkeeper_contract::rules`]) judge them after.

use super::InvalidSpec;
use super::rules::duration;
use crate::api::{JoinKindSpec, JoinModeSpec, JoinSpec, PartitionerSpec};
use streamkeeper_contract::worker_config::{
    JobIdentity, JoinKind, JoinLeft, JoinMode, JoinRight, JoinWindowConfig, Partitioner,
    ProcessorKind,
};

/// The join of `spec`; a re-keyed side's repartition topic is named after `identity`.
pub(super) fn join_kind(
    spec: &JoinSpec,
    identity: &JobIdentity,
) -> Result<ProcessorKind, InvalidSpec> {
    let window = spec
        .window
        .as_ref()
        .map(|window| {
            Ok::<_, InvalidSpec>(JoinWindowConfig {
                before: duration("spec.processor.join.window.before", &window.before)?,
                after: duration("spec.processor.join.window.after", &window.after)?,
                grace: duration("spec.processor.join.window.grace", &window.grace)?,
            })
        })
        .transpose()?;
    let history = spec
        .history
        .as_deref()
        .map(|text| duration("spec.processor.join.history", text))
        .transpose()?;
    Ok(ProcessorKind::Join {
        join: match spec.kind {
            JoinKindSpec::Stream => JoinKind::Stream,
            JoinKindSpec::Table => JoinKind::Table,
            JoinKindSpec::GlobalTable => JoinKind::GlobalTable,
        },
        mode: match spec.mode {
            JoinModeSpec::Inner => JoinMode::Inner,
            JoinModeSpec::Left => JoinMode::Left,
            JoinModeSpec::Outer => JoinMode::Outer,
        },
        left: JoinLeft {
            repartition_topic: spec
                .left
                .as_ref()
                .is_some_and(|left| left.repartition)
                .then(|| identity.repartition_topic("left")),
        },
        right: JoinRight {
            topic: spec.right.topic.clone(),
            repartition_topic: spec
                .right
                .repartition
                .then(|| identity.repartition_topic("right")),
            key_field: spec.right.key_field.clone(),
            time_field: spec.right.time_field.clone(),
        },
        window,
        history,
        partitioner: match spec.partitioner {
            PartitionerSpec::Murmur2 => Partitioner::Murmur2,
            PartitionerSpec::Crc32 => Partitioner::Crc32,
        },
    })
}
