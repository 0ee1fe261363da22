//! Which checkpoints a restore may use, best first: pure, so the rules are tested without S3.
//!
//! A manifest is usable when it belongs to the task, its changelog offset lies within the
//! changelog's current range (a delta replay must be able to start there), and the tombstone
//! rule allows a delta from it. Two owners may both have written manifests, so the best is
//! the one with the highest changelog offset, not the highest sequence.

use streamkeeper_contract::CheckpointManifest;

/// Which checkpoint the restore should use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// The newest usable one, falling back to older ones.
    Newest,
    /// Exactly this sequence number (the operator's `spec.restore`); no fallback.
    Sequence(u64),
}

/// The usable manifests, best first. `delta_is_exact` applies the tombstone rule.
pub fn candidates(
    manifests: Vec<CheckpointManifest>,
    task: u32,
    low: i64,
    high: i64,
    choice: Choice,
    delta_is_exact: impl Fn(&CheckpointManifest) -> bool,
) -> Vec<CheckpointManifest> {
    let mut usable: Vec<CheckpointManifest> = manifests
        .into_iter()
        .filter(|m| m.task == task)
        .filter(|m| match choice {
            Choice::Newest => true,
            Choice::Sequence(sequence) => m.sequence == sequence,
        })
        .filter(|m| m.changelog_offset >= low && m.changelog_offset <= high)
        .filter(|m| m.changelog_offset == high || delta_is_exact(m))
        .collect();
    usable.sort_by_key(|m| std::cmp::Reverse((m.changelog_offset, m.sequence)));
    usable
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
        .filter(|m| m.task == task)
        .filter(|m| match choice {
            Choice::Newest => true,
            Choice::Sequence(sequence) => m.sequence == sequence,
        })
        .collect();
    usable.sort_by_key(|m| std::cmp::Reverse(m.sequence));
    usable
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
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

    #[test]
    fn the_highest_changelog_offset_wins_not_the_highest_sequence() {
        let list = vec![manifest(1, 100), manifest(2, 300), manifest(3, 200)];
        let got = candidates(list, 0, 0, 400, Choice::Newest, |_| true);
        assert_eq!(sequences(&got), vec![2, 3, 1]);
    }

    #[test]
    fn offsets_outside_the_changelog_and_other_tasks_are_refused() {
        let mut other = manifest(9, 150);
        other.task = 1;
        let list = vec![manifest(1, 50), manifest(2, 150), manifest(3, 500), other];
        let got = candidates(list, 0, 100, 400, Choice::Newest, |_| true);
        assert_eq!(sequences(&got), vec![2]);
    }

    #[test]
    fn the_tombstone_rule_applies_unless_nothing_follows() {
        let list = vec![manifest(1, 100), manifest(2, 400)];
        let got = candidates(list, 0, 0, 400, Choice::Newest, |_| false);
        assert_eq!(sequences(&got), vec![2]);
    }

    #[test]
    fn a_chosen_sequence_is_the_only_candidate() {
        let list = vec![manifest(1, 100), manifest(2, 300)];
        let got = candidates(list.clone(), 0, 0, 400, Choice::Sequence(1), |_| true);
        assert_eq!(sequences(&got), vec![1]);
        assert!(candidates(list, 0, 0, 400, Choice::Sequence(7), |_| true).is_empty());
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
