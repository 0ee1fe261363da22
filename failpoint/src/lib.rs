//! Crash and stall points for the failure tests of the worker and the operator:
//! `STREAMKEEPER_FAILPOINT=<name>:<n>` makes the process abort (as abruptly as kill -9: no
//! destructors, no flush) the n-th time it passes the named point; `<name>:<n>:<ms>` instead
//! stalls that thread for `ms` milliseconds, once (a frozen task: a GC pause, a stuck disk).
//! A point the code asks about with [`reached`] instead makes the caller act, once (the input
//! consumer stops fetching, as a stalled one does). Unset, a check is one relaxed atomic load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

struct Armed {
    name: String,
    remaining: AtomicU64,
    /// `None`: abort; `Some`: sleep this long instead.
    stall: Option<Duration>,
}

fn parse(spec: &str) -> Option<Armed> {
    let mut parts = spec.split(':');
    let name = parts.next()?.to_string();
    let count = parts.next()?.parse().ok()?;
    let stall = match parts.next() {
        None => None,
        Some(ms) => Some(Duration::from_millis(ms.parse().ok()?)),
    };
    Some(Armed {
        name,
        remaining: AtomicU64::new(count),
        stall,
    })
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| parse(&std::env::var("STREAMKEEPER_FAILPOINT").ok()?))
        .as_ref()
}

/// Aborts the process (or stalls, see the module docs) when `name` is the armed point and its
/// count is reached.
pub fn hit(name: &str) {
    if let Some(armed) = armed()
        && armed.name == name
        && armed.remaining.fetch_sub(1, Ordering::SeqCst) == 1
    {
        match armed.stall {
            None => {
                eprintln!("failpoint {name} reached: aborting");
                std::process::abort();
            }
            Some(stall) => {
                eprintln!(
                    "failpoint {name} reached: stalling {} ms",
                    stall.as_millis()
                );
                std::thread::sleep(stall);
                eprintln!("failpoint {name}: stall over");
            }
        }
    }
}

/// Whether `name` is the armed point and its count is reached now (true once): the caller then
/// acts out the failure itself.
pub fn reached(name: &str) -> bool {
    armed().is_some_and(|armed| {
        armed.name == name && armed.remaining.fetch_sub(1, Ordering::SeqCst) == 1
    })
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

    #[test]
    fn specs_name_a_point_a_count_and_an_optional_stall() {
        let abort = parse("mid-transaction:3").unwrap();
        assert_eq!(abort.name, "mid-transaction");
        assert_eq!(abort.remaining.into_inner(), 3);
        assert_eq!(abort.stall, None);
        let stall = parse("after-kafka-commit:1:2500").unwrap();
        assert_eq!(stall.stall, Some(Duration::from_millis(2500)));
        assert!(parse("mid-transaction").is_none());
        assert!(parse("mid-transaction:x").is_none());
        assert!(parse("mid-transaction:1:soon").is_none());
    }
}
