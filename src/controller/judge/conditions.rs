//! The merge that keeps a `StatefulStreamJob`'s conditions honest (their types and reasons are
//! in [`crate::vocabulary`]). Conditions are merged, never rebuilt: `lastTransitionTime`
//! moves only when a condition's status changes, which is what `kubectl wait` and alerting read.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The apiserver refuses a condition message longer than this many bytes.
pub const MAX_MESSAGE_BYTES: usize = 32_768;

/// `True`, `False` or `Unknown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConditionStatus {
    True,
    False,
    Unknown,
}

impl ConditionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        }
    }

    pub fn from_bool(value: bool) -> Self {
        if value {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    }
}

/// What a reconcile observed for one condition type. Types and reasons are `&'static str` so
/// they come from [`crate::vocabulary::types`] and [`crate::vocabulary::reasons`], not from
/// formatted text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionUpdate {
    pub type_: &'static str,
    pub status: ConditionStatus,
    pub reason: &'static str,
    pub message: String,
}

impl ConditionUpdate {
    pub fn new(
        type_: &'static str,
        status: ConditionStatus,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// Merges one observation into `existing`. The condition of the same type is replaced in place
/// (order is kept, so a no-op reconcile writes an identical list); `lastTransitionTime` is kept
/// when the status is unchanged and set to `now` when it changes or the type is new. Reason,
/// message and `observedGeneration` always take the new values. A duplicate of the type (which
/// only a hand edit can create) is dropped.
pub fn merge_condition(
    existing: &[Condition],
    update: ConditionUpdate,
    observed_generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    let mut merged = Vec::with_capacity(existing.len() + 1);
    let mut update = Some(update);
    for condition in existing {
        match update.take_if(|u| u.type_ == condition.type_) {
            Some(new) => merged.push(replace(condition, new, observed_generation, now)),
            None if merged
                .iter()
                .any(|c: &Condition| c.type_ == condition.type_) => {}
            None => merged.push(condition.clone()),
        }
    }
    if let Some(new) = update {
        merged.push(fresh(new, observed_generation, now));
    }
    merged
}

/// [`merge_condition`] for several observations at once.
pub fn merge_conditions(
    existing: &[Condition],
    updates: impl IntoIterator<Item = ConditionUpdate>,
    observed_generation: Option<i64>,
    now: &Time,
) -> Vec<Condition> {
    updates
        .into_iter()
        .fold(existing.to_vec(), |conditions, update| {
            merge_condition(&conditions, update, observed_generation, now)
        })
}

/// The condition of type `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of type `type_` is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == ConditionStatus::True.as_str())
}

fn replace(
    old: &Condition,
    new: ConditionUpdate,
    observed_generation: Option<i64>,
    now: &Time,
) -> Condition {
    let status = new.status.as_str();
    let last_transition_time = if old.status == status {
        old.last_transition_time.clone()
    } else {
        now.clone()
    };
    Condition {
        last_transition_time,
        ..fresh(new, observed_generation, now)
    }
}

fn fresh(new: ConditionUpdate, observed_generation: Option<i64>, now: &Time) -> Condition {
    Condition {
        type_: new.type_.to_string(),
        status: new.status.as_str().to_string(),
        reason: new.reason.to_string(),
        message: truncate(new.message),
        observed_generation,
        last_transition_time: now.clone(),
    }
}

fn truncate(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let mut end = MAX_MESSAGE_BYTES;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocabulary::{reasons, types};
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn ready(status: ConditionStatus, reason: &'static str) -> ConditionUpdate {
        ConditionUpdate::new(types::READY, status, reason, "message")
    }

    #[test]
    fn a_new_type_is_appended_with_now() {
        let merged = merge_condition(
            &[],
            ready(ConditionStatus::False, reasons::RECONCILING),
            Some(3),
            &at(100),
        );
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].type_, "Ready");
        assert_eq!(merged[0].status, "False");
        assert_eq!(merged[0].reason, "Reconciling");
        assert_eq!(merged[0].observed_generation, Some(3));
        assert_eq!(merged[0].last_transition_time, at(100));
    }

    #[test]
    fn unchanged_status_keeps_the_transition_time_but_takes_the_rest() {
        let first = merge_condition(
            &[],
            ready(ConditionStatus::False, reasons::RECONCILING),
            Some(1),
            &at(100),
        );
        let second = merge_condition(
            &first,
            ConditionUpdate::new(
                types::READY,
                ConditionStatus::False,
                reasons::TASKS_NOT_RUNNING,
                "2/3 tasks running",
            ),
            Some(2),
            &at(200),
        );
        assert_eq!(second[0].last_transition_time, at(100));
        assert_eq!(second[0].reason, "TasksNotRunning");
        assert_eq!(second[0].message, "2/3 tasks running");
        assert_eq!(second[0].observed_generation, Some(2));
    }

    #[test]
    fn changed_status_moves_the_transition_time() {
        let first = merge_condition(
            &[],
            ready(ConditionStatus::False, reasons::RECONCILING),
            Some(1),
            &at(100),
        );
        let second = merge_condition(
            &first,
            ready(ConditionStatus::True, reasons::ALL_TASKS_RUNNING),
            Some(1),
            &at(200),
        );
        assert_eq!(second[0].status, "True");
        assert_eq!(second[0].last_transition_time, at(200));
    }

    #[test]
    fn a_no_op_merge_is_identical_and_other_types_keep_their_place() {
        let updates = || {
            [
                ready(ConditionStatus::True, reasons::ALL_TASKS_RUNNING),
                ConditionUpdate::new(
                    types::INVALID,
                    ConditionStatus::False,
                    reasons::SPEC_VALID,
                    "",
                ),
                ConditionUpdate::new(
                    types::RETENTION_SAFE,
                    ConditionStatus::True,
                    reasons::WITHIN_RETENTION,
                    "ok",
                ),
            ]
        };
        let first = merge_conditions(&[], updates(), Some(4), &at(100));
        let again = merge_conditions(&first, updates(), Some(4), &at(500));
        assert_eq!(again, first);

        let one_changed = merge_condition(
            &first,
            ConditionUpdate::new(
                types::INVALID,
                ConditionStatus::True,
                reasons::INVALID_SPEC,
                "bad",
            ),
            Some(5),
            &at(600),
        );
        let order: Vec<_> = one_changed.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(order, ["Ready", "Invalid", "RetentionSafe"]);
        assert_eq!(one_changed[0], first[0]);
        assert_eq!(one_changed[1].last_transition_time, at(600));
        assert!(is_true(&one_changed, types::INVALID));
        assert!(!is_true(&one_changed, types::CHECKPOINT_STALE));
    }

    #[test]
    fn duplicates_of_a_type_collapse_into_one() {
        let twice = [
            merge_condition(
                &[],
                ready(ConditionStatus::True, reasons::ALL_TASKS_RUNNING),
                None,
                &at(1),
            )
            .remove(0),
            merge_condition(
                &[],
                ready(ConditionStatus::False, reasons::RECONCILING),
                None,
                &at(2),
            )
            .remove(0),
        ];
        let merged = merge_condition(
            &twice,
            ready(ConditionStatus::True, reasons::ALL_TASKS_RUNNING),
            Some(1),
            &at(3),
        );
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].last_transition_time, at(1));
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let message = "é".repeat(MAX_MESSAGE_BYTES);
        let merged = merge_condition(
            &[],
            ConditionUpdate::new(
                types::INVALID,
                ConditionStatus::True,
                reasons::INVALID_SPEC,
                message,
            ),
            None,
            &at(1),
        );
        assert!(merged[0].message.len() <= MAX_MESSAGE_BYTES);
        assert!(merged[0].message.len() > MAX_MESSAGE_BYTES - 2);
    }
}
