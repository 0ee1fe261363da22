//! The processors a worker binary can run, by name: the built-in ones, and those a user's own
//! binary registers ([`CustomProcessor`], the Rust SDK).
//!
//! A job's config names one. [`Registry::resolve`] finds it and builds it once, before any task
//! starts (`check-config`, and `run`): a name the binary does not offer, or a config the
//! processor refuses, stops the worker with the processor's own reason, which the operator
//! shows in the job's `Invalid` condition. Each task then builds its own copy
//! ([`JobProcessor::pipeline`]).
//!
//! A custom processor's identity in the state is its name, its config and the version it
//! declares ([`ProcessorIdentity`]); a new version reads the state of an older one only when it
//! says so ([`CustomProcessor::reads_state_of`]). A WebAssembly processor's is its config and
//! its module's digest.

use super::api::Processor;
use super::config::{ConfigError, ProcessorConfig};
use super::identity::ProcessorIdentity;
use super::pipeline::Pipeline;
use super::wasm::{WasmLimits, WasmModule};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use streamkeeper_contract::worker_config as rendered;

/// Builds a custom processor from a job's settings, or refuses them.
type BuildFn =
    dyn Fn(&CustomSettings<'_>) -> Result<Box<dyn Processor>, ConfigRefused> + Send + Sync;

/// A processor a worker binary offers under a name: what a job's
/// `processor: {type: custom, custom: {name, config}}` runs.
pub struct CustomProcessor {
    name: String,
    version: u32,
    reads_state_of: BTreeSet<u32>,
    build: Box<BuildFn>,
}

impl std::fmt::Debug for CustomProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CustomProcessor")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("reads_state_of", &self.reads_state_of)
            .finish_non_exhaustive()
    }
}

impl CustomProcessor {
    /// The processor `name` at `version`, built by `build` from a job's settings.
    ///
    /// `build` checks the settings and refuses what it cannot run ([`ConfigRefused`]); it runs
    /// once when the worker starts and once per task. `version` is the version of the
    /// processor's logic and state layout: raise it when either changes (see
    /// [`Self::reads_state_of`]).
    pub fn new<P, F>(name: impl Into<String>, version: u32, build: F) -> Self
    where
        P: Processor + 'static,
        F: Fn(&CustomSettings<'_>) -> Result<P, ConfigRefused> + Send + Sync + 'static,
    {
        Self {
            name: name.into(),
            version,
            reads_state_of: BTreeSet::new(),
            build: Box::new(move |settings| {
                build(settings).map(|processor| Box::new(processor) as Box<dyn Processor>)
            }),
        }
    }

    /// Declares that this version reads the state the given older versions built, under the
    /// same name and config: a bug fix that keeps the state format. A task whose state an
    /// older version built then goes on from it, and records this version in the state; without
    /// the declaration it stops, naming both versions.
    pub fn reads_state_of(mut self, versions: impl IntoIterator<Item = u32>) -> Self {
        self.reads_state_of.extend(versions);
        self
    }

    /// The name the processor is registered under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The declared version.
    pub fn version(&self) -> u32 {
        self.version
    }
}

/// What a custom processor is built from: the job's free config and the fields it reads.
#[derive(Debug, Clone, Copy)]
pub struct CustomSettings<'a> {
    config: &'a Value,
    key_field: &'a str,
    time_field: Option<&'a str>,
}

impl<'a> CustomSettings<'a> {
    /// Settings for building a processor outside a worker (in the processor's own tests).
    pub fn new(config: &'a Value, key_field: &'a str, time_field: Option<&'a str>) -> Self {
        Self {
            config,
            key_field,
            time_field,
        }
    }

    /// The job's `processor.custom.config`, as written (`null` when the job gives none).
    pub fn config(&self) -> &'a Value {
        self.config
    }

    /// The config read into the processor's own type; a config that does not fit is refused,
    /// naming the field. A job without a config reads as `{}`.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigRefused> {
        let empty = Value::Object(Default::default());
        let config = if self.config.is_null() {
            &empty
        } else {
            self.config
        };
        T::deserialize(config).map_err(|e| ConfigRefused::new(format!("config: {e}")))
    }

    /// `spec.processor.keyField`: the field each record's key ([`super::InputRecord::key`]) is
    /// read from.
    pub fn key_field(&self) -> &'a str {
        self.key_field
    }

    /// `spec.processor.timeField`, when the job sets one.
    pub fn time_field(&self) -> Option<&'a str> {
        self.time_field
    }

    /// The time field, for a processor that runs on event time; refused when the job has none.
    pub fn require_time_field(&self) -> Result<&'a str, ConfigRefused> {
        self.time_field.ok_or_else(|| {
            ConfigRefused::new(
                "the processor runs on event time: set spec.processor.timeField".to_string(),
            )
        })
    }
}

/// A custom processor's refusal of its settings, in words a user acts on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigRefused(String);

impl ConfigRefused {
    /// A refusal for `reason`.
    pub fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// Why a processor cannot be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistrationError {
    /// The name is not one a job can name.
    #[error("cannot register processor {name:?}: {reason}")]
    BadName { name: String, reason: String },
    /// A built-in processor, or an earlier registration, has the name.
    #[error(
        "cannot register processor `{0}` twice (the built-in processors are count, aggregate, dedup and join)"
    )]
    Taken(String),
}

/// The custom processors of a worker binary, by name. The default has none: the built-in
/// processors need no registration.
#[derive(Debug, Default, Clone)]
pub struct Registry {
    custom: BTreeMap<String, Arc<CustomProcessor>>,
}

/// Names a custom processor may not take: the built-in processors'.
const BUILT_IN: [&str; 4] = ["count", "aggregate", "dedup", "join"];

impl Registry {
    /// Adds `processor` under its name.
    pub fn register(&mut self, processor: CustomProcessor) -> Result<(), RegistrationError> {
        let name = processor.name.clone();
        streamkeeper_contract::rules::custom_name(&name).map_err(|violation| {
            RegistrationError::BadName {
                name: name.clone(),
                reason: violation.reason,
            }
        })?;
        if BUILT_IN.contains(&name.as_str()) || self.custom.contains_key(&name) {
            return Err(RegistrationError::Taken(name));
        }
        self.custom.insert(name, Arc::new(processor));
        Ok(())
    }

    /// The registered names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.custom.keys().map(String::as_str).collect()
    }

    /// The job's processor, as [`Self::resolve_with`] without a WebAssembly module's bytes.
    pub fn resolve(&self, config: &rendered::ProcessorConfig) -> Result<JobProcessor, ConfigError> {
        self.resolve_with(config, None)
    }

    /// The job's processor: found, and built once to check its settings. A WebAssembly
    /// processor is compiled from `wasm`, its module's bytes; without them (`check-config`) only
    /// its settings are checked, and a task cannot build it.
    pub fn resolve_with(
        &self,
        config: &rendered::ProcessorConfig,
        wasm: Option<&[u8]>,
    ) -> Result<JobProcessor, ConfigError> {
        let custom = match &config.kind {
            rendered::ProcessorKind::Custom { name, config } => Some(Custom {
                processor: self.custom.get(name).cloned().ok_or_else(|| {
                    ConfigError::UnknownCustom {
                        name: name.clone(),
                        offered: self.names().join(", "),
                    }
                })?,
                config: config.clone(),
            }),
            _ => None,
        };
        let wasm = match (&config.kind, wasm) {
            (rendered::ProcessorKind::Wasm { config, limits, .. }, Some(bytes)) => Some(Wasm {
                module: Arc::new(
                    WasmModule::compile(bytes).map_err(|e| ConfigError::Wasm(e.to_string()))?,
                ),
                config: if config.is_null() {
                    "{}".into()
                } else {
                    config.to_string()
                },
                limits: WasmLimits {
                    fuel_per_record: limits.fuel_per_record,
                    memory_bytes: limits.memory_bytes,
                },
            }),
            _ => None,
        };
        let job = JobProcessor {
            config: ProcessorConfig::from(config),
            identity: ProcessorIdentity::of(
                config,
                custom
                    .as_ref()
                    .map(|c| (c.processor.version, &c.processor.reads_state_of)),
            ),
            custom,
            wasm,
        };
        if !matches!(config.kind, rendered::ProcessorKind::Wasm { .. }) || job.wasm.is_some() {
            job.pipeline()?;
        }
        Ok(job)
    }
}

/// A job's processor, resolved: what each task builds its pipeline from, and the identity its
/// state is checked against.
#[derive(Debug, Clone)]
pub struct JobProcessor {
    /// The fields records are decoded by (and a built-in processor's settings).
    config: ProcessorConfig,
    custom: Option<Custom>,
    wasm: Option<Wasm>,
    identity: ProcessorIdentity,
}

/// A compiled WebAssembly module and the job's config and limits for it.
#[derive(Debug, Clone)]
struct Wasm {
    module: Arc<WasmModule>,
    config: String,
    limits: WasmLimits,
}

/// A custom processor and the job's config for it.
#[derive(Debug, Clone)]
struct Custom {
    processor: Arc<CustomProcessor>,
    config: Value,
}

impl JobProcessor {
    /// A new pipeline: the decoders and a new processor.
    pub fn pipeline(&self) -> Result<Pipeline, ConfigError> {
        if let Some(Wasm {
            module,
            config,
            limits,
        }) = &self.wasm
        {
            let processor = module
                .processor(config, *limits)
                .map_err(|e| ConfigError::Wasm(e.to_string()))?;
            return Ok(Pipeline::new(self.config.decoder(), Box::new(processor)));
        }
        let Some(Custom { processor, config }) = &self.custom else {
            return Pipeline::from_config(&self.config);
        };
        let settings = CustomSettings::new(
            config,
            &self.config.key_field,
            self.config.time_field.as_deref(),
        );
        let built = (processor.build)(&settings).map_err(|refusal| ConfigError::Refused {
            name: processor.name.clone(),
            version: processor.version,
            reason: refusal.0,
        })?;
        Ok(Pipeline::new(self.config.decoder(), built))
    }

    /// Which processor builds the job's state.
    pub fn identity(&self) -> &ProcessorIdentity {
        &self.identity
    }
}

#[cfg(test)]
#[path = "registry_tests.rs"]
mod tests;
