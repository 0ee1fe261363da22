//! The restore plan: which source a task's state comes from (local state, a checkpoint, the whole
//! changelog, a restore request), which checkpoint, and which offsets. Pure: the executor
//! ([`super`]) gathers the facts, asks here, and carries the answer out; nothing here reads
//! Kafka, S3, the disk or the clock.
//!
//! Some facts cost a broker call (a read ahead in the changelog, the topic's
//! `delete.retention.ms`), and a restore should only pay for those its decision depends on. So
//! [`discover`] is asked again as facts arrive: it answers [`Step::Need`] with the one fact it
//! lacks, or [`Step::Decided`]. The rules, in the order they apply:
//!
//! 1. Local state that includes changelog offsets past the partition's end means the topic was
//!    deleted or recreated: stop ([`Refusal::ChangelogLost`]), unless a restore request replaces
//!    the state anyway.
//! 2. Local state of another changelog incarnation describes another history, whatever its
//!    offsets say (issue 10, item 4).
//! 3. Local state within the changelog's range is used when nothing but transaction markers
//!    follows it, however long the task was idle (item 3: the stored offset is the commit
//!    marker's, so the end is always one past it), or else when it is younger than the topic's
//!    `delete.retention.ms` (the tombstone rule, [`delta_is_exact`]).
//! 4. Otherwise the checkpoints: those of the topic's incarnation only; the newest written past
//!    the changelog's end means the topic was lost; the usable ones best first
//!    (the contract's `checkpoint_choice`), with the same idle and tombstone rules; when none is usable, or
//!    none installs, the whole changelog.
//!
//! A restore request ([`plan_request`]) runs after the usual restore, because the id it last
//! applied is in the state; a rebuild from the input ([`plan_input_rebuild`]) starts from a
//! checkpoint's input offset, never past input that retention already deleted (item 1).

use std::collections::BTreeMap;
use streamkeeper_contract::CheckpointManifest;
use streamkeeper_contract::checkpoint_choice::{self, ChangelogRange, Choice};
use streamkeeper_contract::restore_request::{RestoreReplaySource, RestoreRequestDocument};

/// Which restore is being planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Valid local state, else the best usable checkpoint, else the whole changelog.
    Usual,
    /// The given checkpoint whatever the local state holds (a restore request); a chosen
    /// sequence never falls back to another checkpoint.
    Requested(Choice),
}

impl Mode {
    pub fn choice(self) -> Choice {
        match self {
            Mode::Usual => Choice::Newest,
            Mode::Requested(choice) => choice,
        }
    }
}

/// The state found on the volume (valid, or a restore interrupted part-way).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalState {
    /// The changelog offset after the last record the state includes.
    pub next_changelog_offset: i64,
    /// Timestamp of the newest changelog record the state includes.
    pub newest_changelog_timestamp_ms: Option<i64>,
    /// The changelog incarnation recorded in the state.
    pub incarnation: Option<String>,
}

/// The task's manifests, as far as they could be listed.
#[derive(Debug, Clone, PartialEq)]
pub enum Manifests {
    /// The worker config has no checkpoint storage.
    Off,
    /// Listing failed (the executor holds the error).
    Unlisted,
    Listed(Vec<CheckpointManifest>),
}

/// What the executor knows so far. `None` (and a missing entry in `quiet`) is a fact not
/// gathered yet; [`discover`] names the one it needs next.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub task: u32,
    pub topic: String,
    pub partition: i32,
    pub mode: Mode,
    /// The changelog partition holds offsets `[low, high)`.
    pub low: i64,
    pub high: i64,
    /// `None`: no usable state on the volume (empty, or corrupt).
    pub local: Option<LocalState>,
    /// The incarnation the changelog's first record names (`Some(None)`: the topic as first
    /// created, or from before incarnations).
    pub incarnation: Option<Option<String>>,
    /// Per offset: whether only control records (transaction markers) follow it.
    pub quiet: BTreeMap<i64, bool>,
    pub delete_retention_ms: Option<i64>,
    pub now_ms: i64,
    pub manifests: Option<Manifests>,
}

/// A fact [`discover`] needs before it can decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    Incarnation,
    /// Whether only control records follow this offset (one read ahead in the changelog).
    OnlyControlRecordsFrom(i64),
    /// The changelog's `delete.retention.ms` (an admin call).
    DeleteRetention,
    /// The task's checkpoint manifests (an S3 listing).
    Manifests,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Need(Need),
    Decided(Decision),
}

/// Where the state comes from.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Replay the changelog after the local state, from `from`.
    Local { from: i64 },
    /// The local state is not used (absent, unusable, or replaced by a request).
    NotLocal(CheckpointDecision),
    /// The local state includes offsets past the changelog's end: the topic was lost
    /// ([`Refusal::ChangelogLost`]); nothing is replayed.
    Refused(Refusal),
}

/// What the checkpoint step decided.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckpointDecision {
    /// No checkpoint storage: the whole changelog.
    Off,
    /// The listing failed while the changelog still starts at 0 and no checkpoint was asked
    /// for: the whole changelog (with a warning).
    UnlistedRebuild,
    /// The listing failed and there is no other way: its error is the task's.
    UnlistedFail,
    Listed {
        summary: CheckpointSummary,
        outcome: Listed,
    },
}

/// What the listed checkpoints allow.
#[derive(Debug, Clone, PartialEq)]
pub enum Listed {
    /// The newest one written includes offsets past the changelog's end: the topic was lost
    /// ([`Refusal::ChangelogLost`]).
    NewestPastEnd(Refusal),
    /// The usable ones, best first: the first that installs is used; when none does (or there
    /// is none), the whole changelog.
    Usable(Vec<CheckpointManifest>),
    /// The checkpoint a request chose is not usable ([`Refusal::CheckpointUnusable`]); no
    /// other is tried.
    ChosenUnusable(Refusal),
}

/// Counts for the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointSummary {
    /// Manifests of the topic's incarnation.
    pub listed: usize,
    /// Manifests of another incarnation, left out.
    pub ignored: usize,
}

/// Why a restore must not go on. The messages name what happened and the way on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The changelog holds less than the state or the newest checkpoint says it wrote.
    #[error("{0}")]
    ChangelogLost(String),
    /// A restore request named a checkpoint that cannot be used.
    #[error(
        "checkpoint {sequence} was asked for but is missing, or its changelog offset is outside the changelog [{low}, {high}], or tombstones after it may be compacted away"
    )]
    CheckpointUnusable { sequence: u64, low: i64, high: i64 },
    /// A rebuild from the input cannot start: the input after the checkpoint is gone.
    #[error(
        "restore request {id}: checkpoint {sequence} starts at input offset {input_offset}, but the input partition now starts at {log_start}: the records in between are gone, so the input cannot rebuild the state"
    )]
    InputGone {
        id: String,
        sequence: u64,
        input_offset: i64,
        log_start: i64,
    },
}

/// The next step of the restore's discovery: a fact it needs, or the decision.
pub fn discover(facts: &Facts) -> Step {
    let requested = matches!(facts.mode, Mode::Requested(_));
    if let Some(local) = &facts.local
        && local.next_changelog_offset > facts.high
        && !requested
    {
        return Step::Decided(Decision::Refused(Refusal::ChangelogLost(format!(
            "task {}'s local state includes changelog offsets up to {}, but {} partition {} ends at {}: the topic was deleted or recreated; restore with spec.restore.source: input",
            facts.task, local.next_changelog_offset, facts.topic, facts.partition, facts.high
        ))));
    }
    let Some(incarnation) = &facts.incarnation else {
        return Step::Need(Need::Incarnation);
    };
    if !requested && let Some(local) = &facts.local {
        match local_usable(facts, local, incarnation) {
            Err(need) => return Step::Need(need),
            Ok(true) => {
                return Step::Decided(Decision::Local {
                    from: local.next_changelog_offset,
                });
            }
            Ok(false) => {}
        }
    }
    match checkpoints(facts, incarnation) {
        Ok(decision) => Step::Decided(decision),
        Err(need) => Step::Need(need),
    }
}

/// Rules 2 and 3 for the local state; `Err` names a missing fact.
fn local_usable(
    facts: &Facts,
    local: &LocalState,
    incarnation: &Option<String>,
) -> Result<bool, Need> {
    let next = local.next_changelog_offset;
    if local.incarnation != *incarnation || next < facts.low || next > facts.high {
        return Ok(false);
    }
    let exact_by_age = |retention| {
        delta_is_exact(
            true,
            local.newest_changelog_timestamp_ms,
            facts.now_ms,
            retention,
        )
    };
    // Either rule is enough; a retention already known (a promotion asks for it first: its
    // delta is rarely only markers) spares the read ahead.
    if facts.delete_retention_ms.is_some_and(exact_by_age) {
        return Ok(true);
    }
    if *facts
        .quiet
        .get(&next)
        .ok_or(Need::OnlyControlRecordsFrom(next))?
    {
        return Ok(true);
    }
    let retention = facts.delete_retention_ms.ok_or(Need::DeleteRetention)?;
    Ok(exact_by_age(retention))
}

/// Rule 4; `Err` names a missing fact.
fn checkpoints(facts: &Facts, incarnation: &Option<String>) -> Result<Decision, Need> {
    let (task, low, high) = (facts.task, facts.low, facts.high);
    let choice = facts.mode.choice();
    let listed = match facts.manifests.as_ref().ok_or(Need::Manifests)? {
        Manifests::Off => return Ok(Decision::NotLocal(CheckpointDecision::Off)),
        // Without the changelog's head, or asked for one checkpoint, there is no other way.
        Manifests::Unlisted if low > 0 || choice != Choice::Newest => {
            return Ok(Decision::NotLocal(CheckpointDecision::UnlistedFail));
        }
        Manifests::Unlisted => return Ok(Decision::NotLocal(CheckpointDecision::UnlistedRebuild)),
        Manifests::Listed(listed) => listed,
    };
    let manifests: Vec<CheckpointManifest> = listed
        .iter()
        .filter(|m| m.changelog_incarnation == *incarnation)
        .cloned()
        .collect();
    let summary = CheckpointSummary {
        listed: manifests.len(),
        ignored: listed.len() - manifests.len(),
    };
    let listed = |outcome| Decision::NotLocal(CheckpointDecision::Listed { summary, outcome });
    if let Some(newest) = manifests.iter().max_by_key(|m| m.sequence)
        && newest.changelog_offset > high
    {
        return Ok(listed(Listed::NewestPastEnd(Refusal::ChangelogLost(
            format!(
                "task {task}'s newest checkpoint {} includes changelog offsets up to {}, but the changelog ends at {high}: the topic was deleted or recreated; restore with spec.restore.source: input",
                newest.sequence, newest.changelog_offset
            ),
        ))));
    }
    // Only transaction markers after the furthest checkpoint (an idle task's) need no
    // tombstone rule for it, however old it is: one read ahead tells.
    let furthest = manifests
        .iter()
        .filter(|m| m.task == task && m.changelog_offset >= low && m.changelog_offset < high)
        .map(|m| m.changelog_offset)
        .max();
    let quiet_from = match furthest {
        Some(offset) => {
            let quiet = *facts
                .quiet
                .get(&offset)
                .ok_or(Need::OnlyControlRecordsFrom(offset))?;
            if quiet { offset } else { high }
        }
        None => high,
    };
    let needs_rule = manifests
        .iter()
        .any(|m| m.changelog_offset >= low && m.changelog_offset < quiet_from);
    let retention_ms = if needs_rule {
        facts.delete_retention_ms.ok_or(Need::DeleteRetention)?
    } else {
        0
    };
    let now = facts.now_ms;
    let changelog = ChangelogRange { low, high };
    let candidates = checkpoint_choice::usable(manifests, task, changelog, choice, |m| {
        let newest = i64::try_from(m.newest_record_ms).ok().filter(|ms| *ms > 0);
        m.changelog_offset >= quiet_from || delta_is_exact(true, newest, now, retention_ms)
    });
    if candidates.is_empty()
        && let Choice::Sequence(sequence) = choice
    {
        return Ok(listed(Listed::ChosenUnusable(
            Refusal::CheckpointUnusable {
                sequence,
                low,
                high,
            },
        )));
    }
    Ok(listed(Listed::Usable(candidates)))
}

/// The clock skew a delta replay allows for: the newest record's timestamp is its writer's
/// clock (another pod's), the age is taken on this pod's clock, and the broker's clock decides
/// when a tombstone goes. Clocks synchronised by NTP differ by milliseconds; a minute covers a
/// badly kept one. A smaller `delete.retention.ms` (tests use 100 ms) allows a quarter of it.
pub const CLOCK_SKEW_MARGIN_MS: i64 = 60_000;

/// Whether replaying only the changelog records after a state is exact. It is unless
/// tombstones written after it may already be compacted away: a tombstone is kept at least
/// `delete.retention.ms` after it is written, so state whose newest record is younger than
/// that, less the clock skew margin ([`CLOCK_SKEW_MARGIN_MS`]), sees every later tombstone.
/// With nothing after the state there is nothing to miss.
pub fn delta_is_exact(
    records_after: bool,
    newest_record_ms: Option<i64>,
    now_ms: i64,
    delete_retention_ms: i64,
) -> bool {
    if !records_after {
        return true;
    }
    let margin = CLOCK_SKEW_MARGIN_MS.min(delete_retention_ms / 4);
    newest_record_ms.is_some_and(|newest| {
        now_ms.saturating_sub(newest).saturating_add(margin) < delete_retention_ms
    })
}

/// How the usual restore ended, as [`plan_request`] needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UsualRestore {
    /// The state is restored; the id of the restore request it last applied.
    Restored { applied: Option<String> },
    /// The changelog is gone ([`Refusal::ChangelogLost`]).
    ChangelogLost,
    /// Any other failure: the task fails with it.
    Failed,
}

/// What to do about the worker's restore request once the usual restore ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestStep {
    /// No request: the usual restore's outcome stands (an error stays the task's error).
    None,
    /// This state has applied the request already (the marker travelled with it).
    AlreadyApplied,
    /// Discard the state and apply the request.
    Apply(ApplyRequest),
    /// The usual restore's error is the task's (a lost changelog only a rebuild from the input
    /// gets past).
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApplyRequest {
    pub choice: Choice,
    pub source: RestoreReplaySource,
    /// The changelog is gone: the rebuild writes a new incarnation.
    pub changelog_lost: bool,
}

/// A request is applied once per id: unless the restored state carries its id, or the usual
/// restore failed for another reason than a lost changelog that the request rebuilds.
pub fn plan_request(request: Option<&RestoreRequestDocument>, usual: &UsualRestore) -> RequestStep {
    let Some(request) = request else {
        return RequestStep::None;
    };
    let changelog_lost = match usual {
        UsualRestore::Restored { applied } if applied.as_deref() == Some(request.id.as_str()) => {
            return RequestStep::AlreadyApplied;
        }
        UsualRestore::Restored { .. } => false,
        UsualRestore::ChangelogLost if request.source == RestoreReplaySource::Input => true,
        UsualRestore::ChangelogLost | UsualRestore::Failed => return RequestStep::Fail,
    };
    RequestStep::Apply(ApplyRequest {
        choice: match request.checkpoint {
            streamkeeper_contract::RestoreCheckpoint::Latest => Choice::Newest,
            streamkeeper_contract::RestoreCheckpoint::Sequence(sequence) => {
                Choice::Sequence(sequence)
            }
        },
        source: request.source,
        changelog_lost,
    })
}

/// The checkpoints a rebuild from the input may start from, best first (the newest written:
/// the changelog's offsets say nothing about a new topic).
pub fn input_candidates(
    manifests: Vec<CheckpointManifest>,
    task: u32,
    choice: Choice,
) -> Vec<CheckpointManifest> {
    checkpoint_choice::for_input_replay(manifests, task, choice)
}

/// Which incarnation the rewritten changelog names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteIncarnation {
    /// A new topic (the old one was lost): a fresh id.
    Fresh,
    /// The same topic rewound: the id its first record names.
    Topic,
}

/// A rebuild from the input, once its checkpoint is installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputRebuild {
    /// The input is processed again from here: the checkpoint's input offset.
    pub from_input_offset: i64,
    /// Input records processed a second time (their output is emitted again), when Kafka still
    /// has the group's position to count from.
    pub reprocessed: Option<u64>,
    pub incarnation: RewriteIncarnation,
}

/// Plans the rebuild from `installed` for request `id`: reprocessing needs every input record
/// after the checkpoint, so one whose input offset retention has passed is refused (that gap
/// is the `RecoveryGap` condition), never skipped.
pub fn plan_input_rebuild(
    id: &str,
    installed: &CheckpointManifest,
    log_start: i64,
    committed: Option<i64>,
    changelog_lost: bool,
) -> Result<InputRebuild, Refusal> {
    if installed.input_offset < log_start {
        return Err(Refusal::InputGone {
            id: id.to_string(),
            sequence: installed.sequence,
            input_offset: installed.input_offset,
            log_start,
        });
    }
    Ok(InputRebuild {
        from_input_offset: installed.input_offset,
        reprocessed: committed
            .map(|position| u64::try_from(position - installed.input_offset).unwrap_or(0)),
        incarnation: if changelog_lost {
            RewriteIncarnation::Fresh
        } else {
            RewriteIncarnation::Topic
        },
    })
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
