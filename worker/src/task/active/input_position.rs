//! Where a task's input resumes, and what happens when Kafka and the state disagree. Pure: the
//! active loop reads the facts and carries the decision out.
//!
//! The state is the truth about its own input. Every transaction that consumes input commits
//! the group offset *and* writes [`keys::INPUT_POSITION`] to the changelog, atomically, so a
//! state restored by any path (local state, a checkpoint plus the delta, the whole changelog)
//! knows exactly which input records it includes. Kafka's committed group offset is only a copy
//! of that position, and the copy can vanish or move: offsets expire
//! `offsets.retention.minutes` (7 days by default) after a manual-assign group's last commit,
//! and a group can be deleted or reset by hand. Trusting the copy over the state reprocesses
//! input onto state that already holds it: duplicate output, double counts.
//!
//! The rule, when a task starts (S: the state's position, C: the committed offset):
//!
//! | S                         | C            | resume at           | and                                  |
//! |---------------------------|--------------|---------------------|--------------------------------------|
//! | nothing consumed          | none or 0    | the partition start | a new job                            |
//! | nothing consumed          | c > 0        | —                   | stop: the state that consumed it is gone |
//! | s                         | s            | s                   |                                      |
//! | s                         | none, or ≠ s | s                   | warn, count, commit s again          |
//! | s below the partition start | any        | the partition start | a recovery gap: reported and counted |
//! | s past the partition end  | any          | —                   | stop: the input was deleted or recreated |
//!
//! A gap is never silent: retention deleted records the job had not processed yet, and the
//! worker says which (log, `streamkeeper_input_records_lost_total`, `/v1/tasks` `inputGap`).

use crate::processor::keys;
use streamkeeper_contract::task_report::InputGap;

/// The encoding version of the [`keys::INPUT_POSITION`] value: a version byte, then the next
/// input offset as a big-endian i64.
const POSITION_FORMAT_VERSION: u8 = 1;

/// The value stored under [`keys::INPUT_POSITION`] for `next_input_offset`.
pub fn encode_position(next_input_offset: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(9);
    out.push(POSITION_FORMAT_VERSION);
    out.extend_from_slice(&next_input_offset.to_be_bytes());
    out
}

/// Decodes [`encode_position`]; `None` for any other bytes (never a guess).
pub fn decode_position(raw: &[u8]) -> Option<i64> {
    let (&version, rest) = raw.split_first()?;
    if version != POSITION_FORMAT_VERSION {
        return None;
    }
    let offset = i64::from_be_bytes(rest.try_into().ok()?);
    (offset >= 0).then_some(offset)
}

/// What the task knows when it starts consuming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputFacts {
    /// The next input offset the state has not consumed; 0 when it has consumed nothing.
    pub state_position: i64,
    /// The group's committed offset for the partition, if Kafka still has one.
    pub committed: Option<i64>,
    /// The first offset the partition still holds.
    pub log_start: i64,
    /// The offset after the partition's last record.
    pub log_end: i64,
}

/// How the committed offset differs from the state's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disagreement {
    /// Kafka has no committed offset (expired, or the group was deleted).
    Missing,
    /// The committed offset is behind the state (a reset to an earlier offset).
    Behind,
    /// The committed offset is ahead of the state (a reset to a later offset).
    Ahead,
}

impl Disagreement {
    pub const ALL: [Disagreement; 3] = [
        Disagreement::Missing,
        Disagreement::Behind,
        Disagreement::Ahead,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Disagreement::Missing => "missing",
            Disagreement::Behind => "behind",
            Disagreement::Ahead => "ahead",
        }
    }
}

/// Where to resume, and what the start must report or repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    pub offset: i64,
    /// How Kafka's committed offset disagreed with the state, if it did.
    pub disagreement: Option<Disagreement>,
    /// Records the job never processed because retention deleted them first.
    pub gap: Option<InputGap>,
}

impl Resume {
    /// Whether Kafka must be given the resume offset before consuming: it disagreed, or a gap
    /// moved the position past what it holds.
    pub fn commit_again(&self) -> bool {
        self.disagreement.is_some() || self.gap.is_some()
    }
}

/// The decision of [`decide`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputStart {
    Resume(Resume),
    /// The task must not consume: the reason names what happened and the way on.
    Stop(String),
}

/// Applies the module's rule to `facts` for task `task` (the reason texts name it).
pub fn decide(task: u32, facts: InputFacts) -> InputStart {
    let InputFacts {
        state_position,
        committed,
        log_start,
        log_end,
    } = facts;
    let committed = committed.filter(|offset| *offset > 0);
    if state_position == 0 {
        return match committed {
            None => InputStart::Resume(Resume {
                offset: log_start,
                disagreement: None,
                gap: None,
            }),
            Some(offset) => InputStart::Stop(format!(
                "task {task}: the job's consumer group has committed input up to offset {offset}, but the task's state (restored from its changelog) has consumed no input: the state that processed those records is gone (the changelog was deleted or emptied). Restore it with spec.restore.source: input from a checkpoint; processing from offset {offset} on this state would lose it, and from the start would repeat that output"
            )),
        };
    }
    if state_position > log_end {
        return InputStart::Stop(format!(
            "task {task}: the state has consumed the input up to offset {state_position}, but the input partition ends at {log_end}: the input topic was deleted or recreated. Create a new job for the new topic, or restore with spec.restore.source: input"
        ));
    }
    let disagreement = match committed {
        Some(offset) if offset == state_position => None,
        None => Some(Disagreement::Missing),
        Some(offset) if offset < state_position => Some(Disagreement::Behind),
        Some(_) => Some(Disagreement::Ahead),
    };
    let (offset, gap) = if state_position < log_start {
        let gap = InputGap {
            from_offset: state_position,
            to_offset: log_start,
        };
        (log_start, Some(gap))
    } else {
        (state_position, None)
    };
    InputStart::Resume(Resume {
        offset,
        disagreement,
        gap,
    })
}

/// The input position a changelog record carries, when it is one: the key and a value of the
/// known encoding.
pub fn position_in_record(key: &[u8], value: Option<&[u8]>) -> Option<i64> {
    if key != keys::INPUT_POSITION {
        return None;
    }
    value.and_then(decode_position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn facts(state_position: i64, committed: Option<i64>) -> InputFacts {
        InputFacts {
            state_position,
            committed,
            log_start: 0,
            log_end: 10_000,
        }
    }

    fn resume(decision: InputStart) -> Resume {
        match decision {
            InputStart::Resume(resume) => resume,
            InputStart::Stop(reason) => panic!("stopped: {reason}"),
        }
    }

    #[test]
    fn a_new_job_starts_at_the_partition_start_without_a_gap() {
        let decision = resume(decide(
            0,
            InputFacts {
                log_start: 500,
                ..facts(0, None)
            },
        ));
        assert_eq!(decision.offset, 500);
        assert_eq!(decision.gap, None);
        assert_eq!(decision.disagreement, None);
        assert!(!decision.commit_again());
    }

    #[test]
    fn agreeing_offsets_resume_at_the_state_position() {
        let decision = resume(decide(0, facts(2_000, Some(2_000))));
        assert_eq!(
            decision,
            Resume {
                offset: 2_000,
                disagreement: None,
                gap: None
            }
        );
    }

    #[test]
    fn the_state_wins_when_offsets_are_gone_or_moved() {
        for (committed, kind) in [
            (None, Disagreement::Missing),
            (Some(0), Disagreement::Missing),
            (Some(100), Disagreement::Behind),
            (Some(9_000), Disagreement::Ahead),
        ] {
            let decision = resume(decide(0, facts(2_000, committed)));
            assert_eq!(decision.offset, 2_000, "{committed:?}");
            assert_eq!(decision.disagreement, Some(kind), "{committed:?}");
        }
    }

    #[test]
    fn committed_input_without_the_state_that_consumed_it_stops_the_task() {
        let InputStart::Stop(reason) = decide(3, facts(0, Some(700))) else {
            panic!("must stop");
        };
        assert!(reason.contains("task 3"), "{reason}");
        assert!(reason.contains("spec.restore.source: input"), "{reason}");
    }

    #[test]
    fn a_state_past_the_partition_end_stops_the_task() {
        let InputStart::Stop(reason) = decide(1, facts(20_000, Some(20_000))) else {
            panic!("must stop");
        };
        assert!(reason.contains("ends at 10000"), "{reason}");
    }

    #[test]
    fn records_deleted_before_they_were_processed_are_a_reported_gap() {
        let decision = resume(decide(
            0,
            InputFacts {
                log_start: 3_000,
                ..facts(2_000, Some(2_000))
            },
        ));
        assert_eq!(decision.offset, 3_000);
        assert_eq!(
            decision.gap,
            Some(InputGap {
                from_offset: 2_000,
                to_offset: 3_000
            })
        );
        assert_eq!(decision.disagreement, None, "Kafka agreed with the state");
        assert!(decision.commit_again(), "Kafka gets the new position");
    }

    #[test]
    fn positions_round_trip_and_foreign_bytes_are_refused() {
        assert_eq!(decode_position(&encode_position(0)), Some(0));
        assert_eq!(decode_position(&encode_position(i64::MAX)), Some(i64::MAX));
        assert_eq!(decode_position(&[]), None);
        assert_eq!(decode_position(&[2, 0, 0, 0, 0, 0, 0, 0, 1]), None);
        assert_eq!(decode_position(&[1, 0, 0]), None);
        assert_eq!(decode_position(&encode_position(-1)), None);
        assert_eq!(
            position_in_record(keys::INPUT_POSITION, Some(&encode_position(42))),
            Some(42)
        );
        assert_eq!(
            position_in_record(keys::STREAM_TIME, Some(&encode_position(42))),
            None
        );
        assert_eq!(position_in_record(keys::INPUT_POSITION, None), None);
    }

    proptest! {
        /// Whatever the facts, a resumed task never starts before the state's position (no
        /// record processed twice) nor outside the partition.
        #[test]
        fn never_reprocesses_what_the_state_holds(
            state in 0i64..1_000_000,
            committed in proptest::option::of(0i64..1_000_000),
            log_start in 0i64..1_000_000,
            extra in 0i64..1_000_000,
        ) {
            let log_end = log_start + extra;
            let facts = InputFacts { state_position: state, committed, log_start, log_end };
            if let InputStart::Resume(resume) = decide(0, facts) {
                prop_assert!(resume.offset >= state);
                prop_assert!(resume.offset >= log_start && resume.offset <= log_end.max(log_start));
                prop_assert_eq!(resume.gap.is_some(), state > 0 && state < log_start);
            }
        }
    }
}
