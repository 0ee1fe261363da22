//! The steps of a promotion, timed: from the assignment that made a standby active to the new
//! owner's first commit. The first commit logs them in one line, so a slow failover or handoff
//! says where its time went (the operator's figure ends at the same commit).

use std::time::{Duration, Instant};

/// The steps in the order a promotion runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// `init_transactions`: the old owner fenced, its open transaction aborted.
    Claim,
    /// The changelog after the standby's position replayed to its end.
    CatchUp,
    /// The input positioned from the state (Kafka's committed offset compared).
    Input,
    /// The first transaction processed and committed.
    FirstCommit,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Claim => "claim",
            Step::CatchUp => "catch_up",
            Step::Input => "input",
            Step::FirstCommit => "first_commit",
        }
    }
}

/// Times the steps of one promotion.
#[derive(Debug, Clone)]
pub(crate) struct PromotionClock {
    started: Instant,
    last: Instant,
    steps: Vec<(Step, Duration)>,
}

impl PromotionClock {
    pub(crate) fn since(started: Instant) -> Self {
        Self {
            started,
            last: started,
            steps: Vec::new(),
        }
    }

    /// Ends `step` now.
    pub(crate) fn mark(&mut self, step: Step) {
        let now = Instant::now();
        self.steps
            .push((step, now.saturating_duration_since(self.last)));
        self.last = now;
    }

    /// From the promotion to now.
    pub(crate) fn total(&self) -> Duration {
        self.started.elapsed()
    }

    /// The steps as `name=ms` pairs, for the log.
    pub(crate) fn summary(&self) -> String {
        self.steps
            .iter()
            .map(|(step, took)| format!("{}={}ms", step.name(), took.as_millis()))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_timed_in_order_and_add_up_to_at_most_the_total() {
        let start = Instant::now() - Duration::from_millis(30);
        let mut clock = PromotionClock::since(start);
        clock.mark(Step::Claim);
        clock.mark(Step::FirstCommit);
        let summary = clock.summary();
        assert!(summary.starts_with("claim="), "{summary}");
        assert!(summary.contains(" first_commit="), "{summary}");
        let sum: Duration = clock.steps.iter().map(|(_, took)| *took).sum();
        assert!(sum <= clock.total());
        assert!(clock.steps[0].1 >= Duration::from_millis(30));
    }
}
