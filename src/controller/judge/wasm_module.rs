//! A WebAssembly processor's module, judged before anything is created or changed: a job
//! whose module is not at its location, or whose bytes there have another digest than the job
//! pins, is `Invalid` naming the module, and nothing is applied. A job already running keeps its
//! pods (and the module they fetched) until the module the spec names is there; a new job
//! creates none. Looked at again every [`MODULE_RECHECK`]: a module is often uploaded just
//! after the job that names it.

use super::next_status::{Observation, condition};
use crate::adapters::wasm_module::ModuleFound;
use crate::api::JobPhase;
use crate::controller::judge::conditions::ConditionStatus;
use crate::vocabulary::{reasons, types};
use std::time::Duration;

/// How soon a job refused for its module is looked at again.
pub const MODULE_RECHECK: Duration = Duration::from_secs(10);

/// Why the job's module cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModuleRefusal {
    #[error(
        "the WebAssembly module {location} does not exist (spec.processor.wasm.module): upload the component there, or fix the key or bucket"
    )]
    Missing { location: String },
    #[error(
        "the WebAssembly module {location} has SHA-256 {found}, but the job pins {pinned} (spec.processor.wasm.module.sha256): nothing runs bytes other than the pinned ones"
    )]
    Mismatch {
        location: String,
        pinned: String,
        found: String,
    },
}

impl ModuleRefusal {
    /// The `Invalid` condition's reason.
    pub fn category(&self) -> &'static str {
        match self {
            ModuleRefusal::Missing { .. } => reasons::MODULE_MISSING,
            ModuleRefusal::Mismatch { .. } => reasons::MODULE_MISMATCH,
        }
    }
}

/// Whether what is at `location` is the module pinned by `pinned`.
pub fn judge(location: &str, pinned: &str, found: &ModuleFound) -> Result<(), ModuleRefusal> {
    match found {
        ModuleFound::Missing => Err(ModuleRefusal::Missing {
            location: location.to_string(),
        }),
        ModuleFound::Found { sha256 } if sha256 == pinned => Ok(()),
        ModuleFound::Found { sha256 } => Err(ModuleRefusal::Mismatch {
            location: location.to_string(),
            pinned: pinned.to_string(),
            found: sha256.clone(),
        }),
    }
}

/// The job with a module that cannot run: `Invalid` naming it, not `Ready`, phase `Failed`.
pub fn refused(observation: &mut Observation, refusal: &ModuleRefusal) {
    observation.phase = Some(JobPhase::Failed);
    observation.conditions.extend([
        condition(
            types::INVALID,
            ConditionStatus::True,
            refusal.category(),
            refusal.to_string(),
        ),
        condition(
            types::READY,
            ConditionStatus::False,
            refusal.category(),
            "the job's WebAssembly module cannot run; nothing is applied until it can",
        ),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_module_runs_only_when_it_is_there_with_the_pinned_digest() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let location = "s3://guests/velocity.wasm";
        assert_eq!(
            judge(location, &a, &ModuleFound::Found { sha256: a.clone() }),
            Ok(())
        );
        let missing = judge(location, &a, &ModuleFound::Missing).unwrap_err();
        assert_eq!(missing.category(), reasons::MODULE_MISSING);
        assert!(missing.to_string().contains(location), "{missing}");
        let other = judge(location, &a, &ModuleFound::Found { sha256: b.clone() }).unwrap_err();
        assert_eq!(other.category(), reasons::MODULE_MISMATCH);
        let message = other.to_string();
        assert!(
            message.contains(location) && message.contains(&a) && message.contains(&b),
            "{message}"
        );

        let mut observation = Observation::default();
        refused(&mut observation, &other);
        assert_eq!(observation.phase, Some(JobPhase::Failed));
        let invalid = observation
            .conditions
            .iter()
            .find(|c| c.type_ == types::INVALID)
            .unwrap();
        assert_eq!(invalid.status, ConditionStatus::True);
        assert_eq!(invalid.reason, reasons::MODULE_MISMATCH);
    }
}
