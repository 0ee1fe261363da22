//! When a job is looked at again without a watch event: the recheck intervals, each spread
//! over a per-job offset so that jobs created or restarted together (a rollout, an operator
//! restart, a node loss) do not all query their workers, Kafka and S3 in the same instant.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::Duration;

/// Periodic re-check of external facts (checkpoint ages, retention), which no watch reports.
pub const RESYNC: Duration = Duration::from_secs(60);
/// Re-check soon while pods are being replaced or the StatefulSet controller catches up.
pub const ROLLING_RECHECK: Duration = Duration::from_secs(2);
/// Re-check while tasks are starting or restoring, so their progress reaches the status.
pub const TASKS_RECHECK: Duration = Duration::from_secs(5);

/// The largest share of an interval added as the job's own offset.
const SPREAD_FRACTION: f64 = 0.25;

/// `interval` plus the job's fixed offset in [0, 25 %) of it. The offset comes from the job's
/// key, so one job keeps a steady cadence while many jobs fan out over the whole window.
pub fn spread(interval: Duration, job_key: &str) -> Duration {
    let mut hasher = DefaultHasher::new();
    job_key.hash(&mut hasher);
    // The top 53 bits give an exactly representable fraction in [0, 1).
    let unit = (hasher.finish() >> 11) as f64 / (1_u64 << 53) as f64;
    interval + interval.mul_f64(unit * SPREAD_FRACTION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_keeps_its_own_steady_offset() {
        let first = spread(TASKS_RECHECK, "shop/card-count");
        assert_eq!(first, spread(TASKS_RECHECK, "shop/card-count"));
        assert!(first >= TASKS_RECHECK);
        assert!(first < TASKS_RECHECK.mul_f64(1.0 + SPREAD_FRACTION));
    }

    #[test]
    fn many_jobs_fan_out_over_the_window() {
        // 500 jobs in 10 buckets of 125 ms over the 1.25 s window: every bucket is used,
        // and none holds more than a third of the jobs.
        let mut buckets = [0_usize; 10];
        for n in 0..500 {
            let extra = spread(TASKS_RECHECK, &format!("bench/job-{n}")) - TASKS_RECHECK;
            let bucket = (extra.as_secs_f64() / TASKS_RECHECK.as_secs_f64() / SPREAD_FRACTION
                * 10.0) as usize;
            buckets[bucket] += 1;
        }
        assert!(buckets.iter().all(|&n| n > 0 && n < 500 / 3), "{buckets:?}");
    }
}
