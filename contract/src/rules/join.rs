//! The rules of a join's settings (see [`ProcessorKind::Join`]): which settings each kind takes,
//! and its durations in whole milliseconds.

use super::{Field, MAX_WINDOW_GRACE, Violation, event_duration, violation};
use crate::duration::format_go_duration;
use crate::worker_config::{JoinKind, JoinMode, JoinWindowConfig, ProcessorKind};
use std::time::Duration;

/// A table join keeps every version of a key newer than this much event time before the
/// newest: beyond a month it is an archive, not a join's history.
pub const MAX_JOIN_HISTORY: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// A join's settings, by its kind; other processor kinds pass.
pub(super) fn join(kind: &ProcessorKind) -> Result<(), Violation> {
    let ProcessorKind::Join {
        join,
        mode,
        left: _,
        right,
        window,
        history,
        partitioner: _,
    } = kind
    else {
        return Ok(());
    };
    if right.topic.trim().is_empty() {
        return Err(violation(Field::JoinRightTopic, "must not be empty"));
    }
    let blank = |field: &Option<String>| field.as_deref().is_some_and(|f| f.trim().is_empty());
    if blank(&right.key_field) {
        return Err(violation(Field::JoinRightKeyField, "must not be empty"));
    }
    if blank(&right.time_field) {
        return Err(violation(Field::JoinRightTimeField, "must not be empty"));
    }
    if join.is_table() && right.repartition_topic.is_some() {
        return Err(violation(
            Field::JoinRightRepartition,
            "is not allowed in a table join: a table is keyed by its records' Kafka key, and re-keying it by a field would make it another table",
        ));
    }
    match join {
        JoinKind::Stream => stream(
            right.key_field.is_some(),
            right.time_field.is_some(),
            window,
            history,
        ),
        JoinKind::Table | JoinKind::GlobalTable => {
            table(*mode, right.key_field.is_some(), window.is_some(), *history)
        }
    }
}

fn stream(
    has_key_field: bool,
    has_time_field: bool,
    window: &Option<JoinWindowConfig>,
    history: &Option<Duration>,
) -> Result<(), Violation> {
    if !has_key_field {
        return Err(violation(
            Field::JoinRightKeyField,
            "is required by a stream join: the right records' join key",
        ));
    }
    if !has_time_field {
        return Err(violation(
            Field::JoinRightTimeField,
            "is required by a stream join: records meet within a window of event time",
        ));
    }
    if history.is_some() {
        return Err(violation(
            Field::JoinHistory,
            "is only allowed in a table join",
        ));
    }
    let window = window.as_ref().ok_or_else(|| {
        violation(
            Field::JoinWindow,
            "is required by a stream join: how far apart in event time two records may meet",
        )
    })?;
    for (field, duration) in [
        (Field::JoinWindowBefore, window.before),
        (Field::JoinWindowAfter, window.after),
        (Field::JoinWindowGrace, window.grace),
    ] {
        // Zero is allowed: `before: 0s, after: 0s` joins records of the same millisecond.
        if !duration.is_zero() {
            event_duration(field, duration)?;
        }
    }
    if window.grace > MAX_WINDOW_GRACE {
        return Err(violation(
            Field::JoinWindowGrace,
            format!(
                "{} is longer than {}: every record stays in state until its window closes",
                format_go_duration(window.grace),
                format_go_duration(MAX_WINDOW_GRACE)
            ),
        ));
    }
    Ok(())
}

fn table(
    mode: JoinMode,
    has_key_field: bool,
    has_window: bool,
    history: Option<Duration>,
) -> Result<(), Violation> {
    if mode == JoinMode::Outer {
        return Err(violation(
            Field::JoinMode,
            "outer is a stream join's mode; a table join is inner or left",
        ));
    }
    if has_key_field {
        return Err(violation(
            Field::JoinRightKeyField,
            "is not allowed in a table join: a table is keyed by its records' Kafka key (a tombstone has no value to read a field from)",
        ));
    }
    if has_window {
        return Err(violation(
            Field::JoinWindow,
            "is only allowed in a stream join; a table join looks a key up as of the record's event time",
        ));
    }
    let history = history.ok_or_else(|| {
        violation(
            Field::JoinHistory,
            "is required by a table join: how far back in event time its versions are kept",
        )
    })?;
    event_duration(Field::JoinHistory, history)?;
    if history > MAX_JOIN_HISTORY {
        return Err(violation(
            Field::JoinHistory,
            format!(
                "{} is longer than {}",
                format_go_duration(history),
                format_go_duration(MAX_JOIN_HISTORY)
            ),
        ));
    }
    Ok(())
}
