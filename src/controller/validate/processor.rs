//! The processor rules behind [`super::validate`]: the settings match the processor type, windows
//! line up, and event time is there when windows or dedup need it. The result is the contract's
//! [`ProcessorConfig`], exactly what the worker runs.

use super::InvalidSpec;
use super::rules::{duration, non_empty};
use crate::api::{AggregateSpec, ProcessorSpec, ProcessorType, WindowSpec, WindowType};
use std::time::Duration;
use streamkeeper_contract::format_go_duration;
use streamkeeper_contract::worker_config::{ProcessorConfig, ProcessorKind, WindowConfig};

/// Windows stay in state until their end plus the grace: a grace beyond a week keeps that many
/// windows per key alive for data that late, which is a reprocessing job, not a grace period.
pub const MAX_WINDOW_GRACE: Duration = Duration::from_secs(7 * 24 * 60 * 60);
/// Each record updates size / advance hopping windows in one transaction; beyond this a record
/// costs more state writes than any sane window layout needs (a day advancing every 10s is 8640).
pub const MAX_WINDOWS_PER_RECORD: u128 = 10_000;

pub(super) fn config(spec: &ProcessorSpec) -> Result<ProcessorConfig, InvalidSpec> {
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
            let ttl = duration("spec.processor.dedup.ttl", &dedup.ttl)?;
            if ttl.is_zero() {
                return Err(InvalidSpec::rule(
                    "spec.processor.dedup.ttl",
                    "must be positive",
                ));
            }
            ProcessorKind::Dedup { ttl }
        }
    };
    let needs_time = matches!(
        kind,
        ProcessorKind::Dedup { .. }
            | ProcessorKind::Aggregate {
                window: Some(_),
                ..
            }
    );
    if needs_time && spec.time_field.is_none() {
        return Err(InvalidSpec::Missing {
            field: "spec.processor.timeField".into(),
            why: "windows and dedup run on event time, never the wall clock",
        });
    }
    Ok(ProcessorConfig {
        key_field,
        time_field: spec.time_field.clone(),
        kind,
    })
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
    const SIZE: &str = "spec.processor.aggregate.window.size";
    const ADVANCE: &str = "spec.processor.aggregate.window.advance";
    const GRACE: &str = "spec.processor.aggregate.window.grace";
    let size = duration(SIZE, &spec.size)?;
    if size < Duration::from_millis(1) {
        return Err(InvalidSpec::rule(SIZE, "must be at least 1ms"));
    }
    let grace = duration(GRACE, &spec.grace)?;
    if grace > MAX_WINDOW_GRACE {
        return Err(InvalidSpec::rule(
            GRACE,
            format!(
                "{} is longer than {}: every window of every key stays in state until its end plus the grace",
                spec.grace,
                format_go_duration(MAX_WINDOW_GRACE)
            ),
        ));
    }
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
        (WindowType::Hopping, Some(text)) => Some(hopping_advance(size, &spec.size, text)?),
    };
    Ok(WindowConfig {
        size,
        advance,
        grace,
    })
}

fn hopping_advance(size: Duration, size_text: &str, text: &str) -> Result<Duration, InvalidSpec> {
    const ADVANCE: &str = "spec.processor.aggregate.window.advance";
    let advance = duration(ADVANCE, text)?;
    if advance.is_zero() || advance > size {
        return Err(InvalidSpec::rule(
            ADVANCE,
            format!("{text} must be positive and at most window.size ({size_text})"),
        ));
    }
    if !size.as_nanos().is_multiple_of(advance.as_nanos()) {
        return Err(InvalidSpec::rule(
            ADVANCE,
            format!(
                "window.size {size_text} is not a multiple of window.advance {text}: every record must fall in the \
                 same number of windows, and window ends must line up with window starts"
            ),
        ));
    }
    let per_record = size.as_nanos() / advance.as_nanos();
    if per_record > MAX_WINDOWS_PER_RECORD {
        return Err(InvalidSpec::rule(
            ADVANCE,
            format!(
                "window.size {size_text} / window.advance {text} puts each record in {per_record} windows, more than \
                 {MAX_WINDOWS_PER_RECORD}"
            ),
        ));
    }
    Ok(advance)
}
