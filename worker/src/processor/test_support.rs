//! Helpers shared by the tests of several files: the built-in processors' configs, random raw
//! input over a few keys, and a run of a pipeline over memory state. The pipeline's tests check
//! the processors with them; the overlay's run the same inputs over RocksDB.

use proptest::prelude::*;

use super::{MemoryState, Pipeline, ProcessOutput, ProcessorConfig};

/// What one record produced: its output, or the category and reason of its error.
pub type Outcome = Result<ProcessOutput, (String, Option<String>)>;

pub const CONFIGS: [&str; 5] = [
    r#"{"key_field":"k","processor":{"kind":"count"}}"#,
    r#"{"key_field":"k","processor":{"kind":"aggregate","value_field":"v"}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate","value_field":"v",
        "window":{"type":"tumbling","size_ms":50},"grace_ms":20}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate","value_field":"v",
        "window":{"type":"hopping","size_ms":60,"advance_ms":20},"grace_ms":0}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"dedup","ttl_ms":40}}"#,
];

pub fn pipeline(config: usize) -> Pipeline {
    let c: ProcessorConfig = serde_json::from_str(CONFIGS[config]).unwrap();
    Pipeline::from_config(&c).unwrap()
}

/// One raw input: mostly good records over a few keys with out-of-order times, some bad.
pub fn raw_record() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        8 => (0u8..4, 0i64..400, -100i32..100).prop_map(|(k, t, v)| {
            format!(r#"{{"k":"key{k}","t":{t},"v":{v}}}"#).into_bytes()
        }),
        1 => (0u8..4, 0i64..400).prop_map(|(k, t)| format!(r#"{{"k":{k},"t":{t},"v":0.5}}"#).into_bytes()),
        1 => Just(b"{not json".to_vec()),
        1 => Just(br#"{"t":1,"v":1}"#.to_vec()),
        1 => Just(br#"{"k":"key1","t":1,"v":"one"}"#.to_vec()),
        1 => Just(br#"{"k":"key1","t":"never","v":1}"#.to_vec()),
    ]
}

/// Runs `inputs` (starting at `first_offset`) against `state`, checking that every failed
/// record left the state untouched.
pub fn run(
    p: &Pipeline,
    inputs: &[Vec<u8>],
    first_offset: i64,
    state: &mut MemoryState,
) -> Vec<Outcome> {
    let mut outcomes = Vec::with_capacity(inputs.len());
    for (i, raw) in inputs.iter().enumerate() {
        let before = state.clone();
        let outcome = p
            .process(raw, 0, first_offset + i as i64, None, state)
            .map_err(|e| {
                (
                    e.category().to_owned(),
                    e.as_bad_record().map(|b| b.reason().to_owned()),
                )
            });
        if outcome.is_err() {
            assert_eq!(*state, before, "a failed record changed state");
        }
        outcomes.push(outcome);
    }
    outcomes
}
