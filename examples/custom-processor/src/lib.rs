//! A per-card velocity check, as a custom streamkeeper processor: each transaction is answered
//! with how many of the card's transactions fall within the `windowMinutes` before it, and is
//! flagged when that makes more than `maxTransactions`.
//!
//! Config (the job's `processor.custom.config`):
//! ```json
//! {"maxTransactions": 3, "windowMinutes": 10}
//! ```
//! The key is the card (`spec.processor.keyField`), the time the transaction's event time
//! (`spec.processor.timeField`, required). Each output record, keyed by the card:
//! ```json
//! {"transaction": {…the input record…}, "recent": 3, "flagged": true}
//! ```
//!
//! State per card: its `maxTransactions` latest event times, so a card's state is bounded
//! whatever its traffic. Everything is decided by event time and the state, never the wall
//! clock, so a replay after a crash, a promoted standby and a restore give the same answers.

use serde::Deserialize;
use streamkeeper_worker::{
    ConfigRefused, CustomProcessor, CustomSettings, InputRecord, OutputRecord, ProcessError,
    ProcessOutput, Processor, StateAccess, StateCodecError,
};

/// The name jobs run the processor by.
pub const NAME: &str = "velocity-check";
/// The processor's version: its logic and its state layout ([`CardTimes`]).
pub const VERSION: u32 = 1;

/// The processor's registration, for a worker's `main`.
pub fn velocity_check() -> CustomProcessor {
    CustomProcessor::new(NAME, VERSION, VelocityCheck::from_settings)
}

/// The job's settings for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VelocityConfig {
    /// More than this many transactions of a card within the window are flagged.
    pub max_transactions: u32,
    /// The window, in minutes of event time, that ends at each transaction.
    pub window_minutes: u32,
}

/// The check, built from one job's settings.
#[derive(Debug, Clone)]
pub struct VelocityCheck {
    max_transactions: usize,
    window_ms: i64,
}

/// The most transactions a window may allow: each is kept in the card's state.
const MAX_TRANSACTIONS: u32 = 1_000;

impl VelocityCheck {
    /// Checks the settings and builds the check.
    pub fn from_settings(settings: &CustomSettings<'_>) -> Result<Self, ConfigRefused> {
        settings.require_time_field()?;
        let config: VelocityConfig = settings.parse()?;
        if !(1..=MAX_TRANSACTIONS).contains(&config.max_transactions) {
            return Err(ConfigRefused::new(format!(
                "maxTransactions is {}: it must be 1 to {MAX_TRANSACTIONS} (each is kept in the card's state)",
                config.max_transactions
            )));
        }
        if config.window_minutes == 0 {
            return Err(ConfigRefused::new("windowMinutes must be at least 1"));
        }
        Ok(Self {
            max_transactions: config.max_transactions as usize,
            window_ms: i64::from(config.window_minutes) * 60_000,
        })
    }
}

impl Processor for VelocityCheck {
    fn kind(&self) -> &'static str {
        NAME
    }

    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let Some(at) = record.event_time_ms else {
            return Err(ProcessError::NoEventTime { processor: NAME });
        };
        let key = record.key.as_bytes();
        let mut times = match state.get(key)? {
            Some(bytes) => CardTimes::decode(&bytes).map_err(|e| ProcessError::corrupt(key, e))?,
            None => CardTimes::default(),
        };
        let recent = times.within(at - self.window_ms, at);
        times.add(at, self.max_transactions);
        state.put(key, times.encode())?;
        let verdict = serde_json::json!({
            "transaction": record.value,
            "recent": recent + 1,
            "flagged": recent + 1 > self.max_transactions,
        });
        Ok(ProcessOutput::emit(vec![OutputRecord {
            key: key.to_vec(),
            value: serde_json::to_vec(&verdict).map_err(ProcessError::Encode)?,
        }]))
    }
}

/// A card's latest event times, oldest first: its state value.
///
/// Stored as a format byte ([`CardTimes::FORMAT`]) and then each time as 8 big-endian bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CardTimes(Vec<i64>);

impl CardTimes {
    /// The state format's version.
    pub const FORMAT: u8 = 1;

    /// How many times lie in `(from, to]`.
    fn within(&self, from: i64, to: i64) -> usize {
        self.0.iter().filter(|&&t| t > from && t <= to).count()
    }

    /// Adds `at`, keeping the `keep` latest times.
    fn add(&mut self, at: i64, keep: usize) {
        let place = self.0.partition_point(|&t| t <= at);
        self.0.insert(place, at);
        let excess = self.0.len().saturating_sub(keep);
        self.0.drain(..excess);
    }

    /// The stored form.
    pub fn encode(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(1 + 8 * self.0.len());
        bytes.push(Self::FORMAT);
        for time in &self.0 {
            bytes.extend_from_slice(&time.to_be_bytes());
        }
        bytes
    }

    /// Reads the stored form; another format or a torn value is refused.
    pub fn decode(bytes: &[u8]) -> Result<Self, StateCodecError> {
        match bytes.split_first() {
            Some((&Self::FORMAT, times)) if times.len() % 8 == 0 => Ok(Self(
                times
                    .chunks_exact(8)
                    .map(|chunk| {
                        let mut time = [0; 8];
                        time.copy_from_slice(chunk);
                        i64::from_be_bytes(time)
                    })
                    .collect(),
            )),
            Some((&Self::FORMAT, _)) => Err(StateCodecError::BadValue {
                why: "card times are not a whole number of 8-byte times",
            }),
            Some((&found, _)) => Err(StateCodecError::UnknownVersion {
                found,
                supported: Self::FORMAT,
            }),
            None => Err(StateCodecError::Empty),
        }
    }
}

#[cfg(test)]
mod tests;
