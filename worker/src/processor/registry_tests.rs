use super::*;
use crate::processor::api::ProcessError;
use crate::processor::identity::Build;
use crate::processor::record::{InputRecord, OutputRecord, ProcessOutput};
use crate::processor::state::{MemoryState, StateAccess};
use serde_json::json;
use streamkeeper_contract::worker_config::ProcessorKind as Rendered;

/// Emits each record's key with a suffix from its config; refuses an empty suffix.
struct Suffix(String);

impl Processor for Suffix {
    fn kind(&self) -> &'static str {
        "suffix"
    }

    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        if record.key == "poison" {
            return Err(ProcessError::rejected("poison is not a key"));
        }
        state.put(record.key.as_bytes(), self.0.clone().into_bytes())?;
        Ok(ProcessOutput::emit(vec![OutputRecord {
            key: record.key.clone().into_bytes(),
            value: format!("{}{}", record.key, self.0).into_bytes(),
        }]))
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SuffixConfig {
    suffix: String,
}

fn suffix(version: u32) -> CustomProcessor {
    CustomProcessor::new("suffix", version, |settings| {
        let config: SuffixConfig = settings.parse()?;
        if config.suffix.is_empty() {
            return Err(ConfigRefused::new("suffix must not be empty"));
        }
        Ok(Suffix(config.suffix))
    })
}

fn rendered(name: &str, config: Value) -> rendered::ProcessorConfig {
    rendered::ProcessorConfig {
        key_field: "card".into(),
        time_field: None,
        kind: Rendered::Custom {
            name: name.into(),
            config,
        },
    }
}

fn registry() -> Registry {
    let mut registry = Registry::default();
    registry.register(suffix(2).reads_state_of([1])).unwrap();
    registry
}

#[test]
fn a_registered_processor_runs_with_its_config() {
    let job = registry()
        .resolve(&rendered("suffix", json!({"suffix": "!"})))
        .unwrap();
    let pipeline = job.pipeline().unwrap();
    assert_eq!(pipeline.kind(), "suffix");
    let mut state = MemoryState::new();
    let out = pipeline
        .process(br#"{"card":"c1"}"#, 0, 7, None, &mut state)
        .unwrap();
    assert_eq!(out.records[0].value, b"c1!");
    assert_eq!(state.get(b"c1").unwrap(), Some(b"!".to_vec()));
    let error = pipeline
        .process(br#"{"card":"poison"}"#, 0, 8, None, &mut state)
        .unwrap_err();
    let bad = error.as_bad_record().expect("a rejection is a bad record");
    assert_eq!(bad.reason(), "rejected");
    assert!(bad.to_string().contains("poison is not a key"), "{bad}");
}

#[test]
fn its_identity_is_name_config_and_declared_version() {
    let job = registry()
        .resolve(&rendered("suffix", json!({"suffix": "!"})))
        .unwrap();
    let identity = job.identity();
    assert_eq!(identity.build, Some(Build::Version(2)));
    assert_eq!(identity.reads_state_of, BTreeSet::from([Build::Version(1)]));
    assert_eq!(identity.settings["name"], "suffix");
    assert_eq!(identity.settings["config"]["suffix"], "!");
    let built_in = registry()
        .resolve(&rendered::ProcessorConfig {
            key_field: "card".into(),
            time_field: None,
            kind: Rendered::Count,
        })
        .unwrap();
    assert_eq!(built_in.identity().build, None);
    assert_eq!(built_in.pipeline().unwrap().kind(), "count");
}

#[test]
fn an_unknown_name_or_a_refused_config_is_refused_before_any_task() {
    let unknown = registry()
        .resolve(&rendered("fraud-score", json!({})))
        .unwrap_err();
    assert!(
        matches!(&unknown, ConfigError::UnknownCustom { name, offered } if name == "fraud-score" && offered == "suffix"),
        "{unknown}"
    );
    assert!(unknown.to_string().contains("spec.image"), "{unknown}");
    let stock = Registry::default()
        .resolve(&rendered("suffix", json!({})))
        .unwrap_err();
    assert!(
        matches!(stock, ConfigError::UnknownCustom { .. }),
        "{stock}"
    );

    let refused = registry()
        .resolve(&rendered("suffix", json!({"suffix": ""})))
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        "processor `suffix` (version 2) refused its config: suffix must not be empty"
    );
    let misspelt = registry()
        .resolve(&rendered("suffix", json!({"sufix": "!"})))
        .unwrap_err();
    assert!(misspelt.to_string().contains("sufix"), "{misspelt}");
    let missing = registry()
        .resolve(&rendered("suffix", Value::Null))
        .unwrap_err();
    assert!(missing.to_string().contains("suffix"), "{missing}");
}

#[test]
fn a_name_is_registered_once_and_never_a_built_in_one() {
    let mut registry = registry();
    assert_eq!(
        registry.register(suffix(3)),
        Err(RegistrationError::Taken("suffix".into()))
    );
    let count = CustomProcessor::new("count", 1, |_| Ok(Suffix("x".into())));
    assert_eq!(
        registry.register(count),
        Err(RegistrationError::Taken("count".into()))
    );
    let upper = CustomProcessor::new("Fraud", 1, |_| Ok(Suffix("x".into())));
    assert!(matches!(
        registry.register(upper),
        Err(RegistrationError::BadName { .. })
    ));
    assert_eq!(registry.names(), ["suffix"]);
}

#[test]
fn settings_require_a_time_field_when_asked() {
    let config = json!({});
    let without = CustomSettings::new(&config, "card", None);
    assert!(
        without
            .require_time_field()
            .unwrap_err()
            .to_string()
            .contains("spec.processor.timeField")
    );
    let with = CustomSettings::new(&config, "card", Some("ts"));
    assert_eq!(with.require_time_field(), Ok("ts"));
    assert_eq!(with.key_field(), "card");
}
