//! The pipeline: a user-defined processor drives through it, and bad records are refused
//! without a trace. Then the whole-pipeline properties every built-in processor must have for
//! exactly-once recovery: the same input from the same state gives identical output and state;
//! resuming from the state committed after any prefix (a restart or a promoted standby)
//! continues exactly as an uninterrupted run; and a bad record never changes state. (The same
//! runs through the overlay over RocksDB are the overlay's tests.)

use super::*;
use crate::processor::record::{InputRecord, OutputRecord};
use crate::processor::state::MemoryState;
use crate::processor::test_support::{CONFIGS, pipeline, raw_record, run};
use proptest::prelude::*;

/// A user-defined processor: echoes the key's length. Shows the trait is implementable
/// outside the built-ins and drives through the same pipeline.
struct KeyLength;

impl Processor for KeyLength {
    fn kind(&self) -> &'static str {
        "key_length"
    }

    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        state.put(record.key.as_bytes(), vec![1])?;
        Ok(ProcessOutput::emit(vec![OutputRecord {
            key: record.key.clone().into_bytes(),
            value: record.key.len().to_string().into_bytes(),
        }]))
    }
}

#[test]
fn custom_processor_runs_through_the_pipeline() {
    let p = Pipeline::new(RecordDecoder::new("k", None), Box::new(KeyLength));
    let mut s = MemoryState::new();
    let out = p.process(br#"{"k":"abc"}"#, 0, 0, None, &mut s).unwrap();
    assert_eq!(out.records[0].value, b"3".to_vec());
    assert_eq!(s.get(b"abc").unwrap(), Some(vec![1]));
    assert_eq!(p.kind(), "key_length");
}

#[test]
fn bad_records_are_flagged_for_the_dead_letter_topic_and_write_nothing() {
    let config: ProcessorConfig = serde_json::from_str(
        r#"{"key_field":"k","time_field":"t","processor":{"kind":"aggregate",
            "value_field":"v","window":{"type":"tumbling","size_ms":10}}}"#,
    )
    .unwrap();
    let p = Pipeline::from_config(&config).unwrap();
    let mut s = MemoryState::new();
    p.process(br#"{"k":"a","t":1,"v":1}"#, 0, 0, None, &mut s)
        .unwrap();
    let before = s.clone();
    for (raw, reason) in [
        (&b"not json"[..], "not_json"),
        (br#"[]"#, "not_an_object"),
        (br#"{"t":1,"v":1}"#, "missing_field"),
        (br#"{"k":"a","v":1}"#, "missing_field"),
        (br#"{"k":"a","t":1}"#, "missing_field"),
        (br#"{"k":"a","t":1,"v":"1"}"#, "wrong_type"),
        (br#"{"k":"a","t":"soon","v":1}"#, "bad_timestamp"),
    ] {
        let err = p.process(raw, 0, 1, None, &mut s).unwrap_err();
        assert_eq!(err.category(), "bad_record");
        assert_eq!(err.as_bad_record().map(|e| e.reason()), Some(reason));
        assert_eq!(s, before, "a bad record leaves no trace in state");
    }
}

#[test]
fn an_event_time_far_past_its_record_timestamp_is_refused() {
    let config = crate::processor::config::ProcessorConfig {
        key_field: "k".into(),
        time_field: Some("t".into()),
        processor: crate::processor::config::ProcessorKind::Count {},
    };
    let p = Pipeline::from_config(&config).unwrap();
    let mut s = MemoryState::new();
    let at = 1_764_000_000_000i64;
    let near = format!(r#"{{"k":"a","t":{}}}"#, at + MAX_EVENT_TIME_AHEAD_MS);
    p.process(near.as_bytes(), 0, 0, Some(at), &mut s).unwrap();
    let far = r#"{"k":"a","t":"9999-12-31T00:00:00Z"}"#;
    let error = p
        .process(far.as_bytes(), 0, 1, Some(at), &mut s)
        .unwrap_err();
    assert_eq!(
        error.as_bad_record().map(|b| b.reason()),
        Some("event_time_too_far_ahead")
    );
    // Without a record timestamp there is nothing to compare with.
    p.process(far.as_bytes(), 0, 2, None, &mut s).unwrap();
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

mod two_inputs {
    use super::*;
    use crate::processor::record::Side;

    fn join_pipeline(processor: &str) -> Pipeline {
        let config: ProcessorConfig = serde_json::from_str(&format!(
            r#"{{"key_field":"k","time_field":"t","processor":{processor}}}"#
        ))
        .unwrap();
        Pipeline::from_config(&config).unwrap()
    }

    fn input<'a>(
        side: Side,
        key: Option<&'a [u8]>,
        payload: Option<&'a [u8]>,
        ts: Option<i64>,
    ) -> RawInput<'a> {
        RawInput {
            side,
            kafka_key: key,
            payload,
            partition: 0,
            offset: 0,
            timestamp_ms: ts,
            headers: Vec::new(),
        }
    }

    fn values(out: &ProcessOutput) -> Vec<String> {
        out.records
            .iter()
            .map(|r| String::from_utf8(r.value.clone()).unwrap())
            .collect()
    }

    const STREAM: &str = r#"{"kind":"join","join":"stream","mode":"inner",
        "right_key_field":"rk","right_time_field":"rt","before_ms":10,"after_ms":10}"#;

    #[test]
    fn a_stream_join_decodes_each_input_with_its_own_fields() {
        let p = join_pipeline(STREAM);
        assert_eq!(p.kind(), "join-stream");
        let mut s = MemoryState::new();
        let left = br#"{"k":"a","t":100}"#;
        let out = p
            .process_input(&input(Side::Left, None, Some(left), None), &mut s)
            .unwrap();
        assert!(out.records.is_empty());
        let right = br#"{"rk":"a","rt":105}"#;
        let out = p
            .process_input(
                &input(Side::Right, Some(b"ignored"), Some(right), None),
                &mut s,
            )
            .unwrap();
        assert_eq!(
            values(&out),
            vec![r#"{"left":{"k":"a","t":100},"right":{"rk":"a","rt":105}}"#]
        );
        // The left fields mean nothing on the right input.
        let before = s.clone();
        let wrong = br#"{"k":"a","t":105}"#;
        let err = p
            .process_input(&input(Side::Right, None, Some(wrong), None), &mut s)
            .unwrap_err();
        assert_eq!(
            err.as_bad_record(),
            Some(&DecodeError::MissingField { field: "rk".into() })
        );
        assert_eq!(s, before);
    }

    #[test]
    fn process_is_the_left_input_of_process_input() {
        let p = join_pipeline(STREAM);
        let mut s = MemoryState::new();
        p.process(br#"{"k":"a","t":100}"#, 0, 0, None, &mut s)
            .unwrap();
        let out = p
            .process_input(
                &input(Side::Right, None, Some(br#"{"rk":"a","rt":100}"#), None),
                &mut s,
            )
            .unwrap();
        assert_eq!(out.records.len(), 1);
    }

    #[test]
    fn a_table_join_keys_table_records_by_kafka_key_and_reads_tombstones() {
        let p = join_pipeline(r#"{"kind":"join","join":"table","mode":"left","history_ms":1000}"#);
        assert_eq!(p.kind(), "join-table");
        let mut s = MemoryState::new();
        let table = |key: Option<&'static [u8]>, payload: Option<&'static [u8]>, ts| {
            input(Side::Right, key, payload, ts)
        };
        let stream = |raw: &'static [u8]| input(Side::Left, None, Some(raw), None);
        p.process_input(
            &table(Some(b"a"), Some(br#"{"name":"ann"}"#), Some(10)),
            &mut s,
        )
        .unwrap();
        let out = p
            .process_input(&stream(br#"{"k":"a","t":20}"#), &mut s)
            .unwrap();
        assert_eq!(
            values(&out),
            vec![r#"{"left":{"k":"a","t":20},"right":{"name":"ann"}}"#]
        );
        p.process_input(&table(Some(b"a"), None, Some(30)), &mut s)
            .unwrap();
        let out = p
            .process_input(&stream(br#"{"k":"a","t":40}"#), &mut s)
            .unwrap();
        assert_eq!(
            values(&out),
            vec![r#"{"left":{"k":"a","t":40},"right":null}"#]
        );
        let before = s.clone();
        for (bad, reason) in [
            (table(None, Some(b"{}"), Some(50)), "missing_record_key"),
            (
                table(Some(&[0xc3]), Some(b"{}"), Some(50)),
                "record_key_not_utf8",
            ),
            (table(Some(b"a"), None, None), "missing_record_timestamp"),
            (table(Some(b"a"), Some(b"[]"), Some(50)), "not_an_object"),
            (input(Side::Left, None, None, None), "null_value"),
        ] {
            let err = p.process_input(&bad, &mut s).unwrap_err();
            assert_eq!(err.as_bad_record().map(|e| e.reason()), Some(reason));
            assert_eq!(s, before, "a bad record leaves no trace");
        }
    }

    #[test]
    fn the_event_time_rule_holds_on_both_inputs() {
        let p = join_pipeline(STREAM);
        let mut s = MemoryState::new();
        let at = 1_764_000_000_000i64;
        let far = format!(r#"{{"rk":"a","rt":{}}}"#, at + MAX_EVENT_TIME_AHEAD_MS + 1);
        let err = p
            .process_input(
                &input(Side::Right, None, Some(far.as_bytes()), Some(at)),
                &mut s,
            )
            .unwrap_err();
        assert_eq!(
            err.as_bad_record().map(|e| e.reason()),
            Some("event_time_too_far_ahead")
        );
        let table = join_pipeline(
            r#"{"kind":"join","join":"table","mode":"inner","right_time_field":"rt","history_ms":10}"#,
        );
        let err = table
            .process_input(
                &input(Side::Right, Some(b"a"), Some(far.as_bytes()), Some(at)),
                &mut s,
            )
            .unwrap_err();
        assert_eq!(
            err.as_bad_record().map(|e| e.reason()),
            Some("event_time_too_far_ahead")
        );
        assert!(s.is_empty());
    }

    #[test]
    fn a_right_record_on_a_single_input_pipeline_is_a_wiring_fault_not_a_bad_record() {
        let p = Pipeline::new(RecordDecoder::new("k", None), Box::new(KeyLength));
        let mut s = MemoryState::new();
        let err = p
            .process_input(
                &input(Side::Right, None, Some(br#"{"k":"a"}"#), None),
                &mut s,
            )
            .unwrap_err();
        assert_eq!(err.category(), "unexpected_side");
        assert!(err.as_bad_record().is_none());
        assert!(s.is_empty());
    }
}
