//! Every branch of the restore plan, from facts alone.

use super::*;
use streamkeeper_contract::restore_request::RestoreCheckpoint;

const DAY: i64 = 86_400_000;
const NOW: i64 = 100 * DAY;

fn manifest(sequence: u64, changelog_offset: i64) -> CheckpointManifest {
    CheckpointManifest {
        version: 1,
        task: 0,
        sequence,
        owner: "w".into(),
        assignment_generation: 0,
        created_at_ms: 0,
        input_offset: 40,
        changelog_offset,
        // Older than a day: only usable for a delta when nothing follows it, or a long
        // tombstone retention.
        newest_record_ms: u64::try_from(NOW - 2 * DAY).unwrap(),
        processor_kind: "count".into(),
        state_format_version: 1,
        files: vec![],
        changelog_incarnation: None,
    }
}

fn local(next: i64, newest_ms: i64) -> LocalState {
    LocalState {
        next_changelog_offset: next,
        newest_changelog_timestamp_ms: Some(newest_ms),
        incarnation: None,
    }
}

/// Changelog `[0, 100)` of the first incarnation, nothing else known.
fn facts() -> Facts {
    Facts {
        task: 0,
        topic: "payments.cards.changelog".into(),
        partition: 0,
        mode: Mode::Usual,
        low: 0,
        high: 100,
        local: None,
        incarnation: None,
        quiet: BTreeMap::new(),
        delete_retention_ms: None,
        now_ms: NOW,
        manifests: None,
    }
}

fn known(mut facts: Facts) -> Facts {
    facts.incarnation = Some(None);
    facts
}

fn decided(facts: &Facts) -> Decision {
    match discover(facts) {
        Step::Decided(decision) => decision,
        Step::Need(need) => panic!("still needs {need:?}"),
    }
}

fn usable(facts: &Facts) -> Vec<u64> {
    match decided(facts) {
        Decision::NotLocal(CheckpointDecision::Listed {
            outcome: Listed::Usable(candidates),
            ..
        }) => candidates.iter().map(|m| m.sequence).collect(),
        other => panic!("not a list of usable checkpoints: {other:?}"),
    }
}

#[test]
fn local_state_past_the_changelogs_end_means_the_changelog_was_lost() {
    let mut facts = facts();
    facts.local = Some(local(150, NOW));
    let Decision::Refused(Refusal::ChangelogLost(reason)) = decided(&facts) else {
        panic!("not refused");
    };
    assert!(
        reason.contains("local state includes changelog offsets up to 150"),
        "{reason}"
    );
    assert!(
        reason.contains("payments.cards.changelog partition 0 ends at 100"),
        "{reason}"
    );
    assert!(reason.contains("spec.restore.source: input"), "{reason}");

    // A restore request replaces the state anyway.
    facts.mode = Mode::Requested(Choice::Newest);
    assert_eq!(discover(&facts), Step::Need(Need::Incarnation));
}

#[test]
fn the_topics_incarnation_is_read_before_anything_is_judged() {
    let mut facts = facts();
    facts.local = Some(local(60, NOW));
    assert_eq!(discover(&facts), Step::Need(Need::Incarnation));
}

#[test]
fn an_idle_local_state_is_used_however_old_when_only_markers_follow_it() {
    // Item 3: the state's offset is its commit marker's, so the end is one past it.
    let mut facts = known(facts());
    facts.local = Some(local(99, NOW - 30 * DAY));
    assert_eq!(
        discover(&facts),
        Step::Need(Need::OnlyControlRecordsFrom(99))
    );
    facts.quiet.insert(99, true);
    assert_eq!(decided(&facts), Decision::Local { from: 99 });
    // No tombstone rule was needed: the broker was never asked for delete.retention.ms.
    assert_eq!(facts.delete_retention_ms, None);

    // At the very end, too.
    facts.local = Some(local(100, NOW - 30 * DAY));
    facts.quiet.insert(100, true);
    assert_eq!(decided(&facts), Decision::Local { from: 100 });
}

#[test]
fn with_records_after_it_local_state_obeys_the_tombstone_rule() {
    let mut facts = known(facts());
    facts.local = Some(local(60, NOW - DAY / 2));
    facts.quiet.insert(60, false);
    assert_eq!(discover(&facts), Step::Need(Need::DeleteRetention));
    facts.delete_retention_ms = Some(DAY);
    assert_eq!(decided(&facts), Decision::Local { from: 60 });

    // Older than delete.retention.ms: tombstones after it may be gone.
    facts.local = Some(local(60, NOW - 2 * DAY));
    assert_eq!(discover(&facts), Step::Need(Need::Manifests));
    // A state that never applied a changelog record has no age to trust.
    facts.local = Some(LocalState {
        newest_changelog_timestamp_ms: None,
        ..local(60, 0)
    });
    assert_eq!(discover(&facts), Step::Need(Need::Manifests));
}

#[test]
fn a_known_retention_decides_a_fresh_delta_without_reading_ahead() {
    let mut facts = known(facts());
    facts.local = Some(local(60, NOW - DAY / 2));
    facts.delete_retention_ms = Some(DAY);
    assert_eq!(decided(&facts), Decision::Local { from: 60 });
    assert!(facts.quiet.is_empty(), "no read ahead was asked for");

    // Older than the retention: only the read ahead can still save the delta.
    facts.local = Some(local(60, NOW - 2 * DAY));
    assert_eq!(
        discover(&facts),
        Step::Need(Need::OnlyControlRecordsFrom(60))
    );
    facts.quiet.insert(60, true);
    assert_eq!(decided(&facts), Decision::Local { from: 60 });
}

#[test]
fn local_state_of_another_incarnation_or_outside_the_changelog_is_not_used() {
    // Item 4: a state kept across a rebuilt changelog describes another history.
    let mut facts = known(facts());
    facts.local = Some(LocalState {
        incarnation: Some("old".into()),
        ..local(60, NOW)
    });
    assert_eq!(
        discover(&facts),
        Step::Need(Need::Manifests),
        "no read ahead"
    );
    facts.incarnation = Some(Some("old".into()));
    assert_eq!(
        discover(&facts),
        Step::Need(Need::OnlyControlRecordsFrom(60))
    );

    // Below the changelog's start: the records after it are gone.
    let mut facts = known(self::facts());
    facts.low = 70;
    facts.local = Some(local(60, NOW));
    assert_eq!(discover(&facts), Step::Need(Need::Manifests));
}

#[test]
fn a_restore_request_never_uses_the_local_state() {
    let mut facts = known(facts());
    facts.mode = Mode::Requested(Choice::Newest);
    facts.local = Some(local(99, NOW));
    facts.quiet.insert(99, true);
    assert_eq!(discover(&facts), Step::Need(Need::Manifests));
}

#[test]
fn without_checkpoint_storage_the_whole_changelog_is_replayed() {
    let mut facts = known(facts());
    facts.manifests = Some(Manifests::Off);
    assert_eq!(decided(&facts), Decision::NotLocal(CheckpointDecision::Off));
}

#[test]
fn an_unlisted_s3_falls_back_to_the_changelog_only_while_it_starts_at_zero_and_nothing_was_chosen()
{
    let mut facts = known(facts());
    facts.manifests = Some(Manifests::Unlisted);
    assert_eq!(
        decided(&facts),
        Decision::NotLocal(CheckpointDecision::UnlistedRebuild)
    );
    facts.low = 5;
    assert_eq!(
        decided(&facts),
        Decision::NotLocal(CheckpointDecision::UnlistedFail)
    );
    facts.low = 0;
    facts.mode = Mode::Requested(Choice::Sequence(3));
    assert_eq!(
        decided(&facts),
        Decision::NotLocal(CheckpointDecision::UnlistedFail)
    );
}

#[test]
fn checkpoints_of_another_incarnation_are_ignored_and_counted() {
    let mut facts = known(facts());
    let mut foreign = manifest(7, 90);
    foreign.changelog_incarnation = Some("other".into());
    facts.manifests = Some(Manifests::Listed(vec![manifest(1, 100), foreign]));
    match decided(&facts) {
        Decision::NotLocal(CheckpointDecision::Listed { summary, outcome }) => {
            assert_eq!(
                summary,
                CheckpointSummary {
                    listed: 1,
                    ignored: 1
                }
            );
            assert_eq!(outcome, Listed::Usable(vec![manifest(1, 100)]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_newest_checkpoint_past_the_changelogs_end_means_the_changelog_was_lost() {
    let mut facts = known(facts());
    facts.manifests = Some(Manifests::Listed(vec![manifest(1, 50), manifest(2, 180)]));
    let Decision::NotLocal(CheckpointDecision::Listed {
        outcome: Listed::NewestPastEnd(Refusal::ChangelogLost(reason)),
        ..
    }) = decided(&facts)
    else {
        panic!("not refused");
    };
    assert!(
        reason.contains("newest checkpoint 2 includes changelog offsets up to 180"),
        "{reason}"
    );
    // Of another incarnation, it says nothing about this topic.
    let mut foreign = manifest(2, 180);
    foreign.changelog_incarnation = Some("other".into());
    facts.manifests = Some(Manifests::Listed(vec![manifest(1, 50), foreign]));
    facts.quiet.insert(50, true);
    assert_eq!(usable(&facts), [1]);
}

#[test]
fn an_idle_tasks_furthest_checkpoint_is_used_however_old() {
    let mut facts = known(facts());
    facts.manifests = Some(Manifests::Listed(vec![manifest(1, 40), manifest(2, 99)]));
    assert_eq!(
        discover(&facts),
        Step::Need(Need::OnlyControlRecordsFrom(99))
    );
    facts.quiet.insert(99, true);
    // The older one needs the tombstone rule.
    assert_eq!(discover(&facts), Step::Need(Need::DeleteRetention));
    facts.delete_retention_ms = Some(DAY);
    assert_eq!(usable(&facts), [2]);
    facts.delete_retention_ms = Some(30 * DAY);
    assert_eq!(usable(&facts), [2, 1], "the highest changelog offset first");
}

#[test]
fn old_checkpoints_with_records_after_them_are_unusable_and_the_changelog_is_replayed() {
    let mut facts = known(facts());
    facts.manifests = Some(Manifests::Listed(vec![manifest(1, 40), manifest(2, 80)]));
    facts.quiet.insert(80, false);
    facts.delete_retention_ms = Some(DAY);
    assert_eq!(usable(&facts), Vec::<u64>::new());
    // One written at the changelog's end needs no rule at all.
    facts.manifests = Some(Manifests::Listed(vec![manifest(3, 100)]));
    facts.delete_retention_ms = None;
    assert_eq!(usable(&facts), [3]);
}

#[test]
fn a_chosen_checkpoint_is_the_only_candidate_and_never_falls_back() {
    let mut facts = known(facts());
    facts.mode = Mode::Requested(Choice::Sequence(1));
    facts.manifests = Some(Manifests::Listed(vec![manifest(1, 100), manifest(2, 100)]));
    assert_eq!(usable(&facts), [1]);
    facts.mode = Mode::Requested(Choice::Sequence(9));
    let Decision::NotLocal(CheckpointDecision::Listed {
        outcome: Listed::ChosenUnusable(refusal),
        ..
    }) = decided(&facts)
    else {
        panic!("not refused");
    };
    assert_eq!(
        refusal.to_string(),
        "checkpoint 9 was asked for but is missing, or its changelog offset is outside the changelog [0, 100], or tombstones after it may be compacted away"
    );
}

#[test]
fn nothing_after_a_state_is_always_exact() {
    assert!(delta_is_exact(false, None, 10 * DAY, DAY));
    assert!(delta_is_exact(false, Some(0), 10 * DAY, DAY));
}

#[test]
fn a_state_younger_than_tombstone_retention_by_the_skew_margin_is_exact() {
    let age = DAY - CLOCK_SKEW_MARGIN_MS - 1;
    assert!(delta_is_exact(true, Some(5 * DAY), 5 * DAY + age, DAY));
}

#[test]
fn a_state_within_the_clock_skew_margin_of_tombstone_retention_needs_a_full_replay() {
    // A writer's clock a few seconds ahead of this pod's makes the state look younger than it
    // is: within a minute of the retention, its later tombstones may be gone already.
    let age = DAY - CLOCK_SKEW_MARGIN_MS / 2;
    assert!(!delta_is_exact(true, Some(5 * DAY), 5 * DAY + age, DAY));
    // A short retention keeps a quarter of itself as the margin.
    assert!(delta_is_exact(true, Some(0), 74, 100));
    assert!(!delta_is_exact(true, Some(0), 76, 100));
}

#[test]
fn a_state_as_old_as_tombstone_retention_needs_a_full_replay() {
    assert!(!delta_is_exact(true, Some(5 * DAY), 6 * DAY, DAY));
    assert!(!delta_is_exact(true, Some(0), 6 * DAY, DAY));
}

#[test]
fn a_state_without_changelog_records_needs_a_full_replay_when_records_follow() {
    assert!(!delta_is_exact(true, None, DAY, DAY));
}

fn request(checkpoint: RestoreCheckpoint, source: RestoreReplaySource) -> RestoreRequestDocument {
    RestoreRequestDocument {
        adopt_input: false,
        version: 1,
        id: "incident-7".into(),
        checkpoint,
        source,
    }
}

#[test]
fn without_a_request_the_usual_restore_stands() {
    for usual in [
        UsualRestore::Restored { applied: None },
        UsualRestore::ChangelogLost,
        UsualRestore::Failed,
    ] {
        assert_eq!(plan_request(None, &usual), RequestStep::None);
    }
}

#[test]
fn a_request_is_applied_once_per_id() {
    let latest = request(RestoreCheckpoint::Latest, RestoreReplaySource::Changelog);
    let applied = |id: &str| UsualRestore::Restored {
        applied: Some(id.into()),
    };
    assert_eq!(
        plan_request(Some(&latest), &applied("incident-7")),
        RequestStep::AlreadyApplied
    );
    let apply = RequestStep::Apply(ApplyRequest {
        choice: Choice::Newest,
        source: RestoreReplaySource::Changelog,
        changelog_lost: false,
    });
    assert_eq!(plan_request(Some(&latest), &applied("incident-6")), apply);
    assert_eq!(
        plan_request(Some(&latest), &UsualRestore::Restored { applied: None }),
        apply
    );
    let sequence = request(
        RestoreCheckpoint::Sequence(4),
        RestoreReplaySource::Changelog,
    );
    assert!(matches!(
        plan_request(Some(&sequence), &applied("x")),
        RequestStep::Apply(ApplyRequest {
            choice: Choice::Sequence(4),
            ..
        })
    ));
}

#[test]
fn only_a_rebuild_from_the_input_gets_past_a_lost_changelog() {
    let input = request(RestoreCheckpoint::Latest, RestoreReplaySource::Input);
    assert_eq!(
        plan_request(Some(&input), &UsualRestore::ChangelogLost),
        RequestStep::Apply(ApplyRequest {
            choice: Choice::Newest,
            source: RestoreReplaySource::Input,
            changelog_lost: true,
        })
    );
    let changelog = request(RestoreCheckpoint::Latest, RestoreReplaySource::Changelog);
    assert_eq!(
        plan_request(Some(&changelog), &UsualRestore::ChangelogLost),
        RequestStep::Fail
    );
    assert_eq!(
        plan_request(Some(&input), &UsualRestore::Failed),
        RequestStep::Fail
    );
}

#[test]
fn a_rebuild_from_the_input_starts_at_the_checkpoints_input_offset_and_counts_the_repeats() {
    let installed = manifest(3, 5);
    let rebuild = plan_input_rebuild("incident-7", &installed, 10, Some(100), false).unwrap();
    assert_eq!(
        rebuild,
        InputRebuild {
            from_input_offset: 40,
            reprocessed: Some(60),
            incarnation: RewriteIncarnation::Topic,
        }
    );
    let lost = plan_input_rebuild("incident-7", &installed, 40, None, true).unwrap();
    assert_eq!(lost.reprocessed, None, "no group position to count from");
    assert_eq!(lost.incarnation, RewriteIncarnation::Fresh);
    let moved_back = plan_input_rebuild("incident-7", &installed, 0, Some(10), false).unwrap();
    assert_eq!(moved_back.reprocessed, Some(0));
}

#[test]
fn a_rebuild_never_skips_input_that_retention_deleted() {
    // Item 1: input the checkpoint has not seen and the broker no longer holds.
    let error = plan_input_rebuild("incident-7", &manifest(3, 5), 41, Some(100), true).unwrap_err();
    assert_eq!(
        error.to_string(),
        "restore request incident-7: checkpoint 3 starts at input offset 40, but the input partition now starts at 41: the records in between are gone, so the input cannot rebuild the state"
    );
}

#[test]
fn a_rebuild_from_the_input_prefers_the_newest_checkpoint_written() {
    let mut other = manifest(9, 10);
    other.task = 1;
    let list = vec![manifest(1, 900), manifest(3, 5), manifest(2, 700), other];
    let got: Vec<u64> = input_candidates(list.clone(), 0, Choice::Newest)
        .iter()
        .map(|m| m.sequence)
        .collect();
    assert_eq!(got, [3, 2, 1]);
    let got: Vec<u64> = input_candidates(list, 0, Choice::Sequence(2))
        .iter()
        .map(|m| m.sequence)
        .collect();
    assert_eq!(got, [2]);
}
