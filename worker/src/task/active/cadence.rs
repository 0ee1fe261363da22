//! When an active task looks at its sources (see `watch`): the lag and the consumers every few
//! seconds, a join's partition counts less often; and when a re-keyed join purges its
//! repartition partitions (see `rekey`).

use std::time::{Duration, Instant};

/// How often the lag and the consumers are looked at.
const LAG_CHECK: Duration = Duration::from_secs(2);
/// How often a join's partition counts are: a metadata request per topic, and partitions are
/// added rarely; every record's placement is checked meanwhile, so none joins wrongly.
const PARTITION_CHECK: Duration = Duration::from_secs(10);

/// How often a re-keyed join's task deletes what it has consumed of its repartition partitions
/// (`rekey`); `STREAMKEEPER_REPARTITION_PURGE_SECONDS` overrides it (tests use a second).
const PURGE: Duration = Duration::from_secs(30);

/// When a re-keyed join's task next purges its repartition partitions: one period in, then
/// once per period.
#[derive(Debug)]
pub(super) struct PurgeCadence {
    every: Duration,
    last: Option<Instant>,
}

impl PurgeCadence {
    pub(super) fn starting_now() -> Self {
        Self {
            every: crate::task::seconds_from_env("STREAMKEEPER_REPARTITION_PURGE_SECONDS", PURGE),
            last: Some(Instant::now()),
        }
    }

    /// Whether a purge is due; if so, it counts as done now.
    pub(super) fn due(&mut self) -> bool {
        due(&mut self.last, self.every, Instant::now())
    }
}

/// When the loop last looked at its sources.
#[derive(Debug)]
pub(super) struct SourceChecks {
    lag: Option<Instant>,
    partitions: Option<Instant>,
}

impl SourceChecks {
    /// The checks of a loop starting now: each comes one period in. Resuming the input has
    /// just read the sources' positions (and a join's partition counts), and a promotion's
    /// first commit should not wait on a round trip per source to the broker.
    pub(super) fn starting_now() -> Self {
        let now = Some(Instant::now());
        Self {
            lag: now,
            partitions: now,
        }
    }

    /// Whether the lag check is due; if so, it counts as done now.
    pub(super) fn lag_due(&mut self) -> bool {
        due(&mut self.lag, LAG_CHECK, Instant::now())
    }

    /// Whether the partition check is due; if so, it counts as done now.
    pub(super) fn partitions_due(&mut self) -> bool {
        due(&mut self.partitions, PARTITION_CHECK, Instant::now())
    }
}

fn due(last: &mut Option<Instant>, every: Duration, now: Instant) -> bool {
    let due = last.is_none_or(|at| now.duration_since(at) >= every);
    if due {
        *last = Some(now);
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_is_due_first_then_once_per_period() {
        let start = Instant::now();
        let mut last = None;
        assert!(due(&mut last, LAG_CHECK, start));
        assert!(!due(&mut last, LAG_CHECK, start + Duration::from_secs(1)));
        assert!(due(&mut last, LAG_CHECK, start + LAG_CHECK));
        assert!(!due(&mut last, LAG_CHECK, start + LAG_CHECK));
    }
}
