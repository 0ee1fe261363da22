//! The velocity check as a WebAssembly guest: each transaction is answered with how many of the
//! card's transactions fall within the `windowMinutes` before it, and flagged when that makes
//! more than `maxTransactions`. State per card: its latest event times, a format byte then 8
//! big-endian bytes each (the native example's `CardTimes`).

wit_bindgen::generate!({
    path: "../../../wit",
    world: "processor",
});

use std::cell::Cell;
use streamkeeper::processor::host;
use streamkeeper::processor::types::{Failure, InputRecord};

const FORMAT: u8 = 1;

thread_local! {
    /// Set by `init`: the settings, which are not state (every instance gets them the same).
    static SETTINGS: Cell<(usize, i64)> = const { Cell::new((0, 0)) };
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Config {
    max_transactions: usize,
    window_minutes: i64,
}

struct VelocityCheck;

fn decode(value: Option<Vec<u8>>) -> Result<Vec<i64>, Failure> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    match value.split_first() {
        Some((&FORMAT, times)) if times.len() % 8 == 0 => Ok(times
            .chunks_exact(8)
            .map(|chunk| i64::from_be_bytes(chunk.try_into().unwrap_or([0; 8])))
            .collect()),
        _ => Err(Failure::BadRecord("unreadable card times".into())),
    }
}

impl Guest for VelocityCheck {
    fn init(config: String) -> Result<(), String> {
        let config: Config = serde_json::from_str(&config).map_err(|e| format!("config: {e}"))?;
        if !(1..=1000).contains(&config.max_transactions) {
            return Err(format!(
                "maxTransactions is {}: it must be 1 to 1000",
                config.max_transactions
            ));
        }
        if config.window_minutes < 1 {
            return Err("windowMinutes must be at least 1".into());
        }
        SETTINGS.set((config.max_transactions, config.window_minutes * 60_000));
        Ok(())
    }

    fn process(input: InputRecord) -> Result<(), Failure> {
        let (limit, window_ms) = SETTINGS.get();
        let at = input
            .event_time_ms
            .ok_or_else(|| Failure::BadRecord("no event time".into()))?;
        let transaction: serde_json::Value = serde_json::from_slice(&input.value)
            .map_err(|e| Failure::BadRecord(format!("not JSON: {e}")))?;
        let key = input.key.as_bytes();
        let mut times = decode(host::state_get(key))?;
        let recent = times.iter().filter(|&&t| t > at - window_ms && t <= at).count() + 1;
        let place = times.partition_point(|&t| t <= at);
        times.insert(place, at);
        let excess = times.len().saturating_sub(limit);
        times.drain(..excess);
        let mut value = vec![FORMAT];
        value.extend(times.iter().flat_map(|t| t.to_be_bytes()));
        host::state_put(key, &value);
        let answer = serde_json::json!({
            "transaction": transaction,
            "recent": recent,
            "flagged": recent > limit,
        });
        host::emit(key, answer.to_string().as_bytes());
        Ok(())
    }

    fn advance(_stream_time_ms: i64) -> Result<(), Failure> {
        Ok(())
    }
}

export!(VelocityCheck);
