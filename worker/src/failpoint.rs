//! Crash points for the crash-sweep tests: `STREAMKEEPER_FAILPOINT=<name>:<n>` makes the
//! process abort (as abruptly as kill -9: no destructors, no flush) the n-th time it passes the
//! named point. Unset, a check is one relaxed atomic load.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Armed {
    name: String,
    remaining: AtomicU64,
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("STREAMKEEPER_FAILPOINT").ok()?;
            let (name, count) = spec.split_once(':')?;
            Some(Armed {
                name: name.to_string(),
                remaining: AtomicU64::new(count.parse().ok()?),
            })
        })
        .as_ref()
}

/// Aborts the process when `name` is the armed point and its count is reached.
pub fn hit(name: &str) {
    if let Some(armed) = armed()
        && armed.name == name
        && armed.remaining.fetch_sub(1, Ordering::SeqCst) == 1
    {
        eprintln!("failpoint {name} reached: aborting");
        std::process::abort();
    }
}
