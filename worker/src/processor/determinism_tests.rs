//! Whole-pipeline properties every built-in processor must have for exactly-once recovery:
//! the same input from the same state gives identical output and state; resuming from the
//! state committed after any prefix (a restart or a promoted standby) continues exactly as an
//! uninterrupted run; and a bad record never changes state.

use proptest::prelude::*;

use super::config::ProcessorConfig;
use super::pipeline::Pipeline;
use super::record::ProcessOutput;
use super::state::MemoryState;

/// What one record produced: its output, or the category and reason of its error.
type Outcome = Result<ProcessOutput, (String, Option<String>)>;

const CONFIGS: [&str; 5] = [
    r#"{"key_field":"k","processor":{"kind":"count"}}"#,
    r#"{"key_field":"k","processor":{"kind":"aggregate","value_field":"v"}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate","value_field":"v",
        "window":{"type":"tumbling","size_ms":50},"grace_ms":20}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate","value_field":"v",
        "window":{"type":"hopping","size_ms":60,"advance_ms":20},"grace_ms":0}}"#,
    r#"{"key_field":"k","time_field":"t","processor":{"kind":"dedup","ttl_ms":40}}"#,
];

fn pipeline(config: usize) -> Pipeline {
    let c: ProcessorConfig = serde_json::from_str(CONFIGS[config]).unwrap();
    Pipeline::from_config(&c).unwrap()
}

/// One raw input: mostly good records over a few keys with out-of-order times, some bad.
fn raw_record() -> impl Strategy<Value = Vec<u8>> {
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
fn run(
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

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn same_input_from_empty_state_gives_identical_output_and_state(
        config in 0..CONFIGS.len(),
        inputs in proptest::collection::vec(raw_record(), 0..80)
    ) {
        let (mut s1, mut s2) = (MemoryState::new(), MemoryState::new());
        let o1 = run(&pipeline(config), &inputs, 0, &mut s1);
        let o2 = run(&pipeline(config), &inputs, 0, &mut s2);
        prop_assert_eq!(&o1, &o2);
        prop_assert_eq!(&s1, &s2);
        // Only bad records fail, and always as bad records with a reason.
        for o in &o1 {
            if let Err((category, reason)) = o {
                prop_assert_eq!(category.as_str(), "bad_record");
                prop_assert!(reason.is_some());
            }
        }
    }

    #[test]
    fn resuming_from_committed_state_equals_an_uninterrupted_run(
        config in 0..CONFIGS.len(),
        inputs in proptest::collection::vec(raw_record(), 1..80),
        cut in any::<prop::sample::Index>()
    ) {
        let cut = cut.index(inputs.len() + 1);
        let mut whole = MemoryState::new();
        let expected = run(&pipeline(config), &inputs, 0, &mut whole);

        // First owner processes the prefix and commits; a new owner (fresh pipeline, state
        // restored as committed) processes the rest.
        let mut committed = MemoryState::new();
        let mut got = run(&pipeline(config), &inputs[..cut], 0, &mut committed);
        let mut restored = committed.clone();
        got.extend(run(&pipeline(config), &inputs[cut..], cut as i64, &mut restored));

        prop_assert_eq!(got, expected);
        prop_assert_eq!(restored, whole);
    }
}

#[test]
fn processors_can_be_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Pipeline>();
}
