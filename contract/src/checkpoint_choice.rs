//! Which checkpoint of a task is the best one to restore, once: the worker restores from it, and
//! the operator shows it in the job's status (each task's checkpoint, its age, the recovery gap).
//! Pure: the caller lists the manifests and reads the changelog's offsets.
//!
//! A manifest is usable for a restore from the changelog when it belongs to the task, its
//! changelog offset lies within the changelog's current range (the delta replay starts there,
//! so it must still exist), and the tombstone rule allows a delta from it. Two owners racing can
//! leave a higher sequence with a lower offset, so the best is the one with the highest
//! changelog offset, not the highest sequence; and since any number of newer manifests may be
//! unusable, every manifest is considered, not only the newest few.

use crate::CheckpointManifest;

/// Which checkpoint the restore should use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The best usable one, falling back to the next ones.
    Newest,
    /// Exactly this sequence number (the operator's `spec.restore`); no fallback.
    Sequence(u64),
}

impl Choice {
    fn admits(self, manifest: &CheckpointManifest) -> bool {
        match self {
            Choice::Newest => true,
            Choice::Sequence(sequence) => manifest.sequence == sequence,
        }
    }
}

/// The offsets a changelog partition holds: `[low, high)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangelogRange {
    pub low: i64,
    pub high: i64,
}

impl ChangelogRange {
    /// Whether a replay can start at `offset`: at `high` there is nothing left to replay, below
    /// `low` the records are gone, past `high` they were never written to this topic.
    pub fn admits(self, offset: i64) -> bool {
        self.low <= offset && offset <= self.high
    }
}

/// The manifests a restore from the changelog may use, best first. `delta_is_exact` applies the
/// tombstone rule to a manifest with records after it (one at the changelog's end needs none).
pub fn usable(
    manifests: Vec<CheckpointManifest>,
    task: u32,
    changelog: ChangelogRange,
    choice: Choice,
    delta_is_exact: impl Fn(&CheckpointManifest) -> bool,
) -> Vec<CheckpointManifest> {
    let mut usable: Vec<CheckpointManifest> = manifests
        .into_iter()
        .filter(|m| m.task == task && choice.admits(m))
        .filter(|m| changelog.admits(m.changelog_offset))
        .filter(|m| m.changelog_offset == changelog.high || delta_is_exact(m))
        .collect();
    usable.sort_by_key(|m| std::cmp::Reverse((m.changelog_offset, m.sequence)));
    usable
}

/// The best usable manifest of `task`: the first of [`usable`] with [`Choice::Newest`].
pub fn best(
    manifests: Vec<CheckpointManifest>,
    task: u32,
    changelog: ChangelogRange,
    delta_is_exact: impl Fn(&CheckpointManifest) -> bool,
) -> Option<CheckpointManifest> {
    usable(manifests, task, changelog, Choice::Newest, delta_is_exact)
        .into_iter()
        .next()
}

/// The manifests a restore from the input may start from, best first. The changelog plays no
/// part (it may be a new, empty topic whose offsets say nothing about the old ones), so the
/// newest written (highest sequence) comes first.
pub fn for_input_replay(
    manifests: Vec<CheckpointManifest>,
    task: u32,
    choice: Choice,
) -> Vec<CheckpointManifest> {
    let mut usable: Vec<CheckpointManifest> = manifests
        .into_iter()
        .filter(|m| m.task == task && choice.admits(m))
        .collect();
    usable.sort_by_key(|m| std::cmp::Reverse(m.sequence));
    usable
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(sequence: u64, changelog_offset: i64) -> CheckpointManifest {
        CheckpointManifest {
            version: 1,
            task: 0,
            sequence,
            owner: "w".into(),
            assignment_generation: 0,
            created_at_ms: 0,
            input_offset: 0,
            changelog_offset,
            newest_record_ms: 0,
            processor_kind: "count".into(),
            state_format_version: 1,
            files: vec![],
            changelog_incarnation: None,
        }
    }

    fn sequences(list: &[CheckpointManifest]) -> Vec<u64> {
        list.iter().map(|m| m.sequence).collect()
    }

    fn range(low: i64, high: i64) -> ChangelogRange {
        ChangelogRange { low, high }
    }

    #[test]
    fn the_highest_changelog_offset_wins_not_the_highest_sequence() {
        let list = vec![manifest(1, 100), manifest(2, 300), manifest(3, 200)];
        let got = usable(list, 0, range(0, 400), Choice::Newest, |_| true);
        assert_eq!(sequences(&got), vec![2, 3, 1]);
    }

    #[test]
    fn offsets_outside_the_changelog_and_other_tasks_are_refused() {
        let mut other = manifest(9, 150);
        other.task = 1;
        let list = vec![manifest(1, 50), manifest(2, 150), manifest(3, 500), other];
        let got = usable(list, 0, range(100, 400), Choice::Newest, |_| true);
        assert_eq!(sequences(&got), vec![2]);
    }

    #[test]
    fn both_ends_of_the_changelog_are_usable() {
        let list = vec![manifest(1, 100), manifest(2, 400)];
        let got = usable(list, 0, range(100, 400), Choice::Newest, |_| true);
        assert_eq!(sequences(&got), vec![2, 1]);
    }

    // The operator's old rule took the highest changelog offset among the 4 newest manifests,
    // without the range: it showed sequence 2 here, which no restore can start from.
    #[test]
    fn a_checkpoint_with_the_highest_offset_past_the_changelog_end_is_not_the_best() {
        let list = vec![manifest(1, 300), manifest(2, 900)];
        let got = best(list, 0, range(0, 400), |_| true);
        assert_eq!(got.map(|m| m.sequence), Some(1));
    }

    // The old operator rule looked only at sequences 3..=6 here and showed 6.
    #[test]
    fn a_usable_checkpoint_older_than_the_four_newest_is_found() {
        let mut list = vec![manifest(1, 250)];
        list.extend((3..=6).map(|sequence| manifest(sequence, 50)));
        let got = best(list, 0, range(100, 400), |_| true);
        assert_eq!(got.map(|m| m.sequence), Some(1));
    }

    #[test]
    fn no_usable_checkpoint_is_none() {
        let list = vec![manifest(1, 50), manifest(2, 500)];
        assert_eq!(best(list, 0, range(100, 400), |_| true), None);
        assert_eq!(best(vec![], 0, range(0, 0), |_| true), None);
    }

    #[test]
    fn the_tombstone_rule_applies_unless_nothing_follows() {
        let list = vec![manifest(1, 100), manifest(2, 400)];
        let got = usable(list, 0, range(0, 400), Choice::Newest, |_| false);
        assert_eq!(sequences(&got), vec![2]);
    }

    #[test]
    fn a_chosen_sequence_is_the_only_candidate() {
        let list = vec![manifest(1, 100), manifest(2, 300)];
        let got = usable(list.clone(), 0, range(0, 400), Choice::Sequence(1), |_| {
            true
        });
        assert_eq!(sequences(&got), vec![1]);
        assert!(usable(list, 0, range(0, 400), Choice::Sequence(7), |_| true).is_empty());
    }

    #[test]
    fn an_input_replay_ignores_the_changelog_and_prefers_the_newest_written() {
        let list = vec![manifest(1, 900), manifest(3, 5), manifest(2, 700)];
        let got = for_input_replay(list.clone(), 0, Choice::Newest);
        assert_eq!(sequences(&got), vec![3, 2, 1]);
        let got = for_input_replay(list, 0, Choice::Sequence(2));
        assert_eq!(sequences(&got), vec![2]);
    }
}
