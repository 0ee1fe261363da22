//! The processor part of [`super::validate`]: the settings match the processor type and their
//! durations parse; the result is the contract's [`ProcessorConfig`], exactly what the worker
//! runs, and it must pass the contract's rules ([`rules::processor`]: windows line up, whole
//! milliseconds, event time where needed), the same the worker checks before it starts.

use super::InvalidSpec;
use super::rules::{duration, non_empty};
use crate::api::{AggregateSpec, ProcessorSpec, ProcessorType, WasmSpec, WindowSpec, WindowType};
use crate::k8s::names;
use streamkeeper_contract::rules;
use streamkeeper_contract::worker_config::{
    JobIdentity, ProcessorConfig, ProcessorKind, WasmLimitsConfig, WasmModuleSource, WindowConfig,
};

/// The processor of `spec`, for the job `identity` names.
pub(super) fn config(
    spec: &ProcessorSpec,
    identity: &JobIdentity,
) -> Result<ProcessorConfig, InvalidSpec> {
    let key_field = non_empty(
        "spec.processor.keyField",
        Some(spec.key_field.as_str()),
        "records are keyed by it",
    )?;
    if spec.time_field.as_deref().is_some_and(str::is_empty) {
        return Err(InvalidSpec::rule(
            "spec.processor.timeField",
            "must not be empty",
        ));
    }
    let only_for = |present: bool, field: &str, kind: &str| {
        if present {
            Err(InvalidSpec::rule(
                field,
                format!("is only allowed when spec.processor.type is {kind}"),
            ))
        } else {
            Ok(())
        }
    };
    only_for(
        spec.aggregate.is_some() && spec.type_ != ProcessorType::Aggregate,
        "spec.processor.aggregate",
        "aggregate",
    )?;
    only_for(
        spec.dedup.is_some() && spec.type_ != ProcessorType::Dedup,
        "spec.processor.dedup",
        "dedup",
    )?;
    only_for(
        spec.join.is_some() && spec.type_ != ProcessorType::Join,
        "spec.processor.join",
        "join",
    )?;
    only_for(
        spec.custom.is_some() && spec.type_ != ProcessorType::Custom,
        "spec.processor.custom",
        "custom",
    )?;
    only_for(
        spec.wasm.is_some() && spec.type_ != ProcessorType::Wasm,
        "spec.processor.wasm",
        "wasm",
    )?;
    let kind = match spec.type_ {
        ProcessorType::Count => ProcessorKind::Count,
        ProcessorType::Aggregate => {
            let aggregate = spec
                .aggregate
                .as_ref()
                .ok_or_else(|| InvalidSpec::Missing {
                    field: "spec.processor.aggregate".into(),
                    why: "spec.processor.type is aggregate",
                })?;
            aggregate_kind(aggregate)?
        }
        ProcessorType::Dedup => {
            let dedup = spec.dedup.as_ref().ok_or_else(|| InvalidSpec::Missing {
                field: "spec.processor.dedup".into(),
                why: "spec.processor.type is dedup",
            })?;
            ProcessorKind::Dedup {
                ttl: duration("spec.processor.dedup.ttl", &dedup.ttl)?,
            }
        }
        ProcessorType::Join => {
            let join = spec.join.as_ref().ok_or_else(|| InvalidSpec::Missing {
                field: "spec.processor.join".into(),
                why: "spec.processor.type is join",
            })?;
            super::join::join_kind(join, identity)?
        }
        ProcessorType::Custom => {
            let custom = spec.custom.as_ref().ok_or_else(|| InvalidSpec::Missing {
                field: "spec.processor.custom".into(),
                why: "spec.processor.type is custom",
            })?;
            ProcessorKind::Custom {
                name: custom.name.clone(),
                config: custom
                    .config
                    .clone()
                    .map_or(serde_json::Value::Null, serde_json::Value::Object),
            }
        }
        ProcessorType::Wasm => {
            let wasm = spec.wasm.as_ref().ok_or_else(|| InvalidSpec::Missing {
                field: "spec.processor.wasm".into(),
                why: "spec.processor.type is wasm",
            })?;
            if let Some(secret) = &wasm.module.credentials_secret {
                super::rules::credentials_secret(
                    "spec.processor.wasm.module.credentialsSecret",
                    secret,
                )?;
            }
            wasm_kind(wasm)
        }
    };
    let config = ProcessorConfig {
        key_field,
        time_field: spec.time_field.clone(),
        kind,
    };
    rules::processor(&config)?;
    Ok(config)
}

fn wasm_kind(spec: &WasmSpec) -> ProcessorKind {
    let defaults = WasmLimitsConfig::default();
    let limits = spec.limits.as_ref();
    ProcessorKind::Wasm {
        module: WasmModuleSource {
            bucket: spec.module.bucket.clone(),
            key: spec.module.key.clone().unwrap_or_default(),
            file: spec
                .module
                .config_map
                .as_ref()
                .map(|_| names::WASM_MODULE_FILE.to_string()),
            credentials_dir: spec
                .module
                .credentials_secret
                .as_ref()
                .map(|_| names::WASM_MODULE_S3_DIR.to_string()),
            sha256: spec.module.sha256.clone(),
        },
        config: spec
            .config
            .clone()
            .map_or(serde_json::Value::Null, serde_json::Value::Object),
        limits: WasmLimitsConfig {
            fuel_per_record: limits
                .and_then(|l| l.fuel_per_record)
                .unwrap_or(defaults.fuel_per_record),
            memory_bytes: limits
                .and_then(|l| l.memory_bytes)
                .unwrap_or(defaults.memory_bytes),
        },
        reads_state_of: spec.reads_state_of.clone().unwrap_or_default(),
    }
}

fn aggregate_kind(spec: &AggregateSpec) -> Result<ProcessorKind, InvalidSpec> {
    let value_field = non_empty(
        "spec.processor.aggregate.valueField",
        Some(spec.value_field.as_str()),
        "the number to aggregate",
    )?;
    let window = spec.window.as_ref().map(window).transpose()?;
    Ok(ProcessorKind::Aggregate {
        value_field,
        window,
    })
}

fn window(spec: &WindowSpec) -> Result<WindowConfig, InvalidSpec> {
    const ADVANCE: &str = "spec.processor.aggregate.window.advance";
    let advance = match (spec.type_, spec.advance.as_deref()) {
        (WindowType::Tumbling, None) => None,
        (WindowType::Tumbling, Some(_)) => {
            return Err(InvalidSpec::rule(
                ADVANCE,
                "is not allowed for tumbling windows",
            ));
        }
        (WindowType::Hopping, None) => {
            return Err(InvalidSpec::Missing {
                field: ADVANCE.into(),
                why: "hopping windows start every advance",
            });
        }
        (WindowType::Hopping, Some(text)) => Some(duration(ADVANCE, text)?),
    };
    Ok(WindowConfig {
        size: duration("spec.processor.aggregate.window.size", &spec.size)?,
        advance,
        grace: duration("spec.processor.aggregate.window.grace", &spec.grace)?,
    })
}
