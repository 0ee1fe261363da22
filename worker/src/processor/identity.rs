//! Which processor builds a task's state, as the state records it: the processor's settings
//! that the state depends on, and which build of its logic wrote it (a custom processor's
//! declared version, a WebAssembly module's digest). The task compares it with the stored one
//! before it reads the state (`task::active::identity`).
//!
//! A build may declare that it reads the state of earlier builds of the same settings (a bug
//! fix that keeps the state's format): a custom processor with
//! `CustomProcessor::reads_state_of`, a WebAssembly job with `spec.processor.wasm.readsStateOf`.
//! Where a module is fetched from and the sandbox's limits do not change what the state means:
//! they are not part of the identity.

use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::fmt;
use streamkeeper_contract::worker_config as rendered;

/// One build of a processor's logic.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Build {
    /// A custom processor's declared version.
    Version(u32),
    /// A WebAssembly component's SHA-256.
    Module(String),
}

impl fmt::Display for Build {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Build::Version(version) => write!(f, "version {version}"),
            Build::Module(digest) => write!(f, "module {digest}"),
        }
    }
}

/// Which processor builds a task's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessorIdentity {
    /// The rendered processor config as JSON, without its build and without what does not
    /// change the state's meaning (a module's location, the sandbox's limits).
    pub settings: Value,
    /// Which build of the logic: none for a built-in processor (the worker's version is not
    /// part of it: built-in state formats are versioned themselves).
    pub build: Option<Build>,
    /// Earlier builds, with the same settings, whose state this one reads.
    pub reads_state_of: BTreeSet<Build>,
}

impl ProcessorIdentity {
    /// The identity of the job's processor `config`; a custom processor's with the version it
    /// declares and the older versions whose state it reads.
    pub fn of(config: &rendered::ProcessorConfig, custom: Option<(u32, &BTreeSet<u32>)>) -> Self {
        let (settings, build) = split(serde_json::to_value(config).unwrap_or(Value::Null));
        let (build, reads_state_of) = match (&config.kind, custom) {
            (_, Some((version, readable))) => (
                Some(Build::Version(version)),
                readable.iter().map(|&v| Build::Version(v)).collect(),
            ),
            (rendered::ProcessorKind::Wasm { reads_state_of, .. }, None) => (
                build,
                reads_state_of
                    .iter()
                    .map(|digest| Build::Module(digest.clone()))
                    .collect(),
            ),
            _ => (build, BTreeSet::new()),
        };
        Self {
            settings,
            build,
            reads_state_of,
        }
    }

    /// An identity as the state stores it (what it reads is not stored).
    pub fn from_stored(json: Value) -> Self {
        let (settings, build) = split(json);
        Self {
            settings,
            build,
            reads_state_of: BTreeSet::new(),
        }
    }

    /// The JSON the state stores: the settings with the build in them (a custom processor's
    /// `version` beside the config's fields, a module's `module.sha256`), as it always was.
    pub fn to_stored(&self) -> Value {
        let mut json = self.settings.clone();
        if let Value::Object(fields) = &mut json {
            match &self.build {
                Some(Build::Version(version)) => {
                    fields.insert("version".into(), (*version).into());
                }
                Some(Build::Module(digest)) => {
                    fields.insert("module".into(), json!({ "sha256": digest }));
                }
                None => {}
            }
        }
        json
    }
}

/// Splits an identity's JSON (rendered or stored, by any earlier worker) into its settings and
/// its build. A WebAssembly processor's stored identity once held the module's bucket and key
/// and the limits: they are dropped here, so that state still matches.
fn split(mut json: Value) -> (Value, Option<Build>) {
    let Value::Object(fields) = &mut json else {
        return (json, None);
    };
    if fields.get("kind").and_then(Value::as_str) == Some("wasm") {
        let digest = fields
            .remove("module")
            .and_then(|module| module.get("sha256")?.as_str().map(str::to_string));
        fields.remove("limits");
        fields.remove("readsStateOf");
        return (json, digest.map(Build::Module));
    }
    let version = fields
        .remove("version")
        .and_then(|v| v.as_u64())
        .and_then(|v| u32::try_from(v).ok());
    (json, version.map(Build::Version))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rendered::{ProcessorKind, WasmLimitsConfig, WasmModuleSource};

    fn wasm(key: &str, sha256: &str, fuel: u64, reads: &[&str]) -> rendered::ProcessorConfig {
        rendered::ProcessorConfig {
            key_field: "card".into(),
            time_field: Some("ts".into()),
            kind: ProcessorKind::Wasm {
                module: WasmModuleSource {
                    bucket: None,
                    key: key.into(),
                    file: None,
                    credentials_dir: None,
                    sha256: sha256.into(),
                },
                config: json!({"maxTransactions": 3}),
                limits: WasmLimitsConfig {
                    fuel_per_record: fuel,
                    memory_bytes: 64 << 20,
                },
                reads_state_of: reads.iter().map(|d| d.to_string()).collect(),
            },
        }
    }

    #[test]
    fn a_modules_identity_is_its_digest_and_config_not_its_location_or_limits() {
        let a = "a".repeat(64);
        let ours = ProcessorIdentity::of(&wasm("guests/v1.wasm", &a, 1000, &[]), None);
        assert_eq!(ours.build, Some(Build::Module(a.clone())));
        let moved = ProcessorIdentity::of(&wasm("elsewhere/v1.wasm", &a, 5, &[]), None);
        assert_eq!(moved, ours);
        let stored = ours.to_stored();
        assert_eq!(stored["module"], json!({"sha256": a}));
        assert!(stored.get("limits").is_none(), "{stored}");
        assert_eq!(ProcessorIdentity::from_stored(stored), ours);
    }

    #[test]
    fn a_wasm_identity_stored_with_its_location_and_limits_reads_the_same() {
        // What a worker stored before the identity left the location and limits out.
        let a = "a".repeat(64);
        let before =
            serde_json::to_value(wasm("guests/v1.wasm", &a, 1000, &[])).unwrap_or(Value::Null);
        assert!(before["module"]["key"].is_string() && before["limits"].is_object());
        let ours = ProcessorIdentity::of(&wasm("guests/v1.wasm", &a, 1000, &[]), None);
        assert_eq!(ProcessorIdentity::from_stored(before), ours);
    }

    #[test]
    fn a_module_declares_the_earlier_digests_it_reads() {
        let (a, b) = ("a".repeat(64), "b".repeat(64));
        let ours = ProcessorIdentity::of(&wasm("guests/v2.wasm", &b, 1000, &[&a]), None);
        assert_eq!(ours.build, Some(Build::Module(b)));
        assert_eq!(ours.reads_state_of, BTreeSet::from([Build::Module(a)]));
        assert!(ours.to_stored().get("readsStateOf").is_none());
    }

    #[test]
    fn a_built_in_has_no_build() {
        let count = rendered::ProcessorConfig {
            key_field: "card".into(),
            time_field: None,
            kind: ProcessorKind::Count,
        };
        let ours = ProcessorIdentity::of(&count, None);
        assert_eq!(ours.build, None);
        assert_eq!(
            ours.to_stored(),
            json!({"keyField": "card", "kind": "count"})
        );
    }
}
