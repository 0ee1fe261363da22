//! A scale-down of a job with standbys hands the leaving pods' tasks off before they go, as a
//! rolling upgrade does for the pod it replaces. The StatefulSet removes the highest ordinals,
//! so the loop gives pods at or above the new replica count nothing (their actives move to
//! caught-up standbys while they still run, and their standby copies are placed again on the
//! pods that stay), and the reconcile keeps the StatefulSet at its old size until those pods
//! hold nothing and every copy is warm. The job therefore never runs a task without a warm
//! standby because it scaled down, and no task stalls longer than one handoff; a pod that just
//! stopped would cost each of its tasks a promotion and each of its standbys a fresh warm-up.

use super::rule_inputs::ordinal;
use super::shared::LoopView;
use std::time::Duration;

/// How long a scale-down waits for its drain before it removes the pods anyway (a copy that
/// cannot warm up must not keep the job at its old size for ever).
pub const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// Whether `pod` leaves when the job scales to `target` pods.
pub fn leaving(pod: &str, target: i32) -> bool {
    ordinal(pod)
        .and_then(|n| i32::try_from(n).ok())
        .is_some_and(|n| n >= target)
}

/// How many pods the StatefulSet keeps while the job scales down to `target`: up to the
/// highest leaving pod the loop lists, until every leaving pod holds nothing and every copy is
/// warm. `None` when nothing leaves or the drain is done. Pure, so it is tested; the caller
/// asks only once the loop has listed the pods.
pub(super) fn pods_to_keep(view: &LoopView, target: i32) -> Option<i32> {
    let leaving: Vec<&String> = view.pods.iter().filter(|p| leaving(p, target)).collect();
    let highest = leaving
        .iter()
        .filter_map(|p| ordinal(p))
        .filter_map(|n| i32::try_from(n).ok())
        .max()?;
    let drained = leaving.iter().all(|pod| view.holds_nothing(pod));
    (!(drained && view.copies_warm)).then_some(highest + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use streamkeeper_contract::{AssignmentDocument, TaskAssignment};

    fn view(assignment: &[(&str, &str)], released: &[&str], copies_warm: bool) -> LoopView {
        let document = AssignmentDocument {
            version: 1,
            generation: 3,
            tasks: assignment
                .iter()
                .enumerate()
                .map(|(task, (active, standby))| TaskAssignment {
                    task: u32::try_from(task).unwrap(),
                    active: Some(active.to_string()),
                    standbys: vec![standby.to_string()],
                })
                .collect(),
        };
        LoopView {
            document: Some(document),
            pods: ["job-0", "job-1", "job-2"].map(String::from).to_vec(),
            listed: true,
            released: released.iter().map(|p| p.to_string()).collect(),
            unreachable: BTreeSet::new(),
            copies_warm,
            settled: copies_warm,
        }
    }

    #[test]
    fn the_leaving_pod_stays_until_it_holds_nothing_and_every_copy_is_warm() {
        let before = view(&[("job-0", "job-1"), ("job-2", "job-0")], &[], true);
        assert_eq!(pods_to_keep(&before, 2), Some(3), "job-2 owns task 1");
        let standby_left = view(&[("job-0", "job-2"), ("job-1", "job-0")], &["job-2"], true);
        assert_eq!(
            pods_to_keep(&standby_left, 2),
            Some(3),
            "job-2 has a standby"
        );
        let warming = view(&[("job-0", "job-1"), ("job-1", "job-0")], &["job-2"], false);
        assert_eq!(
            pods_to_keep(&warming, 2),
            Some(3),
            "a copy is still warming"
        );
        let not_released = view(&[("job-0", "job-1"), ("job-1", "job-0")], &[], true);
        assert_eq!(pods_to_keep(&not_released, 2), Some(3), "job-2 still runs");
        let done = view(&[("job-0", "job-1"), ("job-1", "job-0")], &["job-2"], true);
        assert_eq!(pods_to_keep(&done, 2), None);
        assert_eq!(pods_to_keep(&before, 3), None, "nothing leaves");
        let mut gone = before;
        gone.unreachable.insert("job-2".into());
        gone.document = done.document.clone();
        assert_eq!(pods_to_keep(&gone, 2), None, "a dead pod holds nothing");
        assert_eq!(pods_to_keep(&not_released, 1), Some(3), "two pods leave");
    }
}
