//! WebAssembly processors, with real guests built by `examples/wasm/build.sh`: the velocity
//! check in Python (`examples/wasm/python/app.py`, componentize-py) and in C
//! (`examples/wasm/c/velocity.c`, clang and wit-bindgen), and the count processor in both.
//!
//! For each velocity guest:
//! - It answers like the native velocity check, reading and writing state through the host.
//! - The sandbox holds: a record that loops forever runs out of fuel, one that allocates without
//!   end runs out of memory, one that fails hard (Python raises, C aborts) traps; each is a bad
//!   record with that reason, the state it wrote first is undone as the task undoes any bad
//!   record's (through the task's own path: its overlay over a real store), and the next record
//!   runs on a fresh instance.
//! - Two instances fed the same records build the same state, byte for byte, and the C and
//!   Python guests build the same state as each other.
//! - A config the guest refuses is refused with its words.
//!
//! And each count guest emits exactly what the built-in count processor emits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

mod support;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use streamkeeper_worker::processor::wasm::{WasmError, WasmLimits, WasmModule};
use streamkeeper_worker::processor::{
    CountProcessor, MemoryState, Pipeline, ProcessError, ProcessOutput, RawInput, RecordDecoder,
};
use streamkeeper_worker::store::{ChangeSet, Overlay, RocksStore};
use streamkeeper_worker::task::apply_record;

/// The velocity check's guests, each run through the same tests.
const VELOCITY_GUESTS: [&str; 2] = ["python-velocity", "c-velocity"];
/// The count processor's guests.
const COUNT_GUESTS: [&str; 2] = ["python-count", "c-count"];

/// A guest's compiled module, compiled once per test binary (each guest on its own, so tests
/// compiling different guests do not wait on each other).
fn module(name: &'static str) -> Arc<WasmModule> {
    type Cell = Arc<OnceLock<Arc<WasmModule>>>;
    static MODULES: LazyLock<Mutex<HashMap<&'static str, Cell>>> = LazyLock::new(Default::default);
    let cell = MODULES.lock().unwrap().entry(name).or_default().clone();
    cell.get_or_init(|| {
        let bytes = support::wasm::guest_bytes(name);
        Arc::new(WasmModule::compile(&bytes).unwrap())
    })
    .clone()
}

const CONFIG: &str = r#"{"maxTransactions": 2, "windowMinutes": 10}"#;

fn velocity(guest: &'static str, limits: WasmLimits) -> Pipeline {
    let processor = module(guest).processor(CONFIG, limits).unwrap();
    Pipeline::new(
        RecordDecoder::new("card".to_string(), Some("ts".to_string())),
        Box::new(processor),
    )
}

/// `(recent, flagged)` of the answer, or the dead-letter reason.
fn run(
    pipeline: &Pipeline,
    state: &mut MemoryState,
    offset: i64,
    json: &str,
) -> Result<(u64, bool), String> {
    answered(
        pipeline.process(json.as_bytes(), 0, offset, None, state),
        json,
    )
}

/// [`run`] as the task runs a record: on its transaction's overlay over a real store, through
/// [`apply_record`], which undoes a refused record's writes.
fn run_in_task(
    pipeline: &Pipeline,
    overlay: &mut Overlay<'_>,
    offset: i64,
    json: &str,
) -> Result<(u64, bool), String> {
    let input = RawInput::left(json.as_bytes(), 0, offset, None);
    let applied = apply_record(pipeline, &input, overlay)
        .map(|fits| fits.unwrap_or_else(|oversized| panic!("{oversized}")));
    answered(applied, json)
}

fn answered(
    processed: Result<ProcessOutput, ProcessError>,
    json: &str,
) -> Result<(u64, bool), String> {
    match processed {
        Ok(out) => {
            assert_eq!(out.records.len(), 1);
            let answer: serde_json::Value = serde_json::from_slice(&out.records[0].value).unwrap();
            let input: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(
                answer["transaction"], input,
                "the answer carries the transaction"
            );
            Ok((
                answer["recent"].as_u64().unwrap(),
                answer["flagged"].as_bool().unwrap(),
            ))
        }
        Err(error) => Err(error
            .as_bad_record()
            .map(|bad| format!("{}: {bad}", bad.reason()))
            .unwrap_or_else(|| panic!("not a bad record: {error}"))),
    }
}

/// The changes an overlay holds, as (key, value) pairs.
fn held(changes: &ChangeSet) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    changes
        .iter()
        .map(|(key, value)| (key.to_vec(), value.map(<[u8]>::to_vec)))
        .collect()
}

fn minute(card: &str, minute: i64) -> String {
    format!(r#"{{"card":"{card}","ts":{}}}"#, minute * 60_000)
}

#[test]
fn each_velocity_guest_answers_like_the_native_velocity_check() {
    for guest in VELOCITY_GUESTS {
        let pipeline = velocity(guest, WasmLimits::default());
        let mut state = MemoryState::new();
        let answers: Vec<_> = [0, 1, 2, 11, 30, 31]
            .iter()
            .enumerate()
            .map(|(i, &m)| run(&pipeline, &mut state, i as i64, &minute("c1", m)).unwrap())
            .collect();
        // The same answers as examples/custom-processor's test of the native check.
        assert_eq!(
            answers,
            [
                (1, false),
                (2, false),
                (3, true),
                (2, false),
                (1, false),
                (2, false)
            ],
            "{guest}"
        );
        let keys: Vec<Vec<u8>> = state.entries().keys().cloned().collect();
        assert_eq!(
            keys,
            [b"g/c1".to_vec(), b"mstream_time".to_vec()],
            "{guest}"
        );
        // The native check's state: a format byte, then the two latest times (minutes 30, 31).
        let times = [1u8]
            .into_iter()
            .chain((30 * 60_000i64).to_be_bytes())
            .chain((31 * 60_000i64).to_be_bytes())
            .collect::<Vec<u8>>();
        assert_eq!(state.entries()[&b"g/c1".to_vec()], times, "{guest}");
        // A job without a time field gives the guest no event time: it refuses the record.
        let processor = module(guest)
            .processor(CONFIG, WasmLimits::default())
            .unwrap();
        let untimed = Pipeline::new(
            RecordDecoder::new("card".to_string(), None),
            Box::new(processor),
        );
        let no_time = run(&untimed, &mut state, 6, &minute("c1", 40)).unwrap_err();
        assert!(no_time.contains("no event time"), "{guest}: {no_time}");
    }
}

#[test]
fn a_poisoned_record_is_a_bad_record_with_its_reason_and_leaves_no_trace() {
    let limits = WasmLimits {
        fuel_per_record: 200_000_000,
        memory_bytes: 128 << 20,
    };
    for guest in VELOCITY_GUESTS {
        let pipeline = velocity(guest, limits);
        let volume = tempfile::tempdir().unwrap();
        let store = RocksStore::open(volume.path(), 0, &Default::default())
            .unwrap()
            .store;
        let mut overlay = Overlay::new(&store);
        assert_eq!(
            run_in_task(&pipeline, &mut overlay, 0, &minute("c1", 0)),
            Ok((1, false)),
            "{guest}"
        );
        let before = held(overlay.changes());
        let mut changes = overlay.into_changes();
        for (poison, reason) in [
            ("loop", "guest_out_of_fuel"),
            ("allocate", "guest_out_of_memory"),
            ("trap", "guest_trapped"),
            // The clock stands still: each sleep is over at once, and the loop burns fuel.
            ("sleep", "guest_out_of_fuel"),
        ] {
            // Each record on the transaction's overlay, as the task hands them over.
            let mut overlay = Overlay::with_changes(&store, changes);
            let record = format!(r#"{{"card":"c1","ts":60000,"poison":"{poison}"}}"#);
            let error = run_in_task(&pipeline, &mut overlay, 1, &record).unwrap_err();
            assert!(error.starts_with(reason), "{guest}, {poison}: {error}");
            // The guest wrote `poisoned` before it misbehaved.
            assert_eq!(
                held(overlay.changes()),
                before,
                "{guest}: {poison} left a trace in the state"
            );
            // The next record runs on a fresh instance, from the state as it was.
            let mut probe = Overlay::with_changes(&store, overlay.changes().clone());
            assert_eq!(
                run_in_task(&pipeline, &mut probe, 2, &minute("c1", 1)),
                Ok((2, false)),
                "{guest}, after {poison}"
            );
            changes = overlay.into_changes();
        }
        let mut overlay = Overlay::with_changes(&store, changes);
        let error = run_in_task(
            &pipeline,
            &mut overlay,
            3,
            r#"{"card":"c1","ts":60000,"poison":"trap"}"#,
        )
        .unwrap_err();
        assert!(
            error.contains("poisoned record"),
            "{guest}: the trap says why: {error}"
        );
        // Only the record's own top-level field counts, not a nested one or a string.
        let nested = r#"{"card":"c1","ts":60000,"x":{"poison":"trap"},"y":"\"poison\":\"trap\""}"#;
        assert_eq!(
            run_in_task(&pipeline, &mut overlay, 4, nested),
            Ok((2, false)),
            "{guest}"
        );
    }
}

#[test]
fn two_instances_fed_the_same_records_build_the_same_state() {
    let records: Vec<String> = (0..200)
        .map(|i| minute(&format!("c{}", i % 7), (i * 13) % 50))
        .collect();
    let states: Vec<(&str, MemoryState)> = VELOCITY_GUESTS
        .iter()
        .flat_map(|&guest| [guest, guest])
        .map(|guest| {
            let pipeline = velocity(guest, WasmLimits::default());
            let mut state = MemoryState::new();
            for (offset, record) in records.iter().enumerate() {
                run(&pipeline, &mut state, offset as i64, record).unwrap();
            }
            (guest, state)
        })
        .collect();
    for (guest, state) in &states {
        // Byte for byte, across instances and across the two languages.
        assert_eq!(state, &states[0].1, "{guest} against {}", states[0].0);
    }
    assert_eq!(
        states[0].1.entries().len(),
        8,
        "7 cards and the stream time"
    );
}

#[test]
fn a_config_the_guest_refuses_is_refused_in_its_words() {
    for guest in VELOCITY_GUESTS {
        for (config, words) in [
            (
                r#"{"maxTransactions": 0, "windowMinutes": 1}"#,
                "maxTransactions is 0",
            ),
            (
                r#"{"maxTransactions": 1001, "windowMinutes": 1}"#,
                "it must be 1 to 1000",
            ),
            (
                r#"{"maxTransactions": 2, "windowMinutes": 0}"#,
                "windowMinutes must be at least 1",
            ),
            (
                r#"{"maxTransactions": 2, "windowMinutes": 1, "zeta": 1, "alpha": [2]}"#,
                "unknown config field(s): alpha, zeta",
            ),
        ] {
            let refused = module(guest)
                .processor(config, WasmLimits::default())
                .unwrap_err();
            assert!(
                matches!(&refused, WasmError::Refused(said) if said.contains(words)),
                "{guest}, {config}: {refused}"
            );
        }
    }
    let not_a_component = WasmModule::compile(b"\0asm\x01\0\0\0").unwrap_err();
    assert!(
        matches!(not_a_component, WasmError::Compile(_)),
        "{not_a_component}"
    );
}

#[test]
fn each_count_guest_emits_what_the_built_in_count_processor_emits() {
    // Repeated keys, and keys that need escaping in the output's JSON.
    let keys = [
        "a",
        "b",
        "user-7",
        "say \"hi\"",
        r"back\slash",
        "tab\there",
        "line\nbreak",
        "bell\u{7}",
        "déjà vu ✓",
    ];
    let records: Vec<String> = (0..300)
        .map(|i| serde_json::json!({"k": keys[(i * 7) % keys.len()], "n": i}).to_string())
        .collect();
    let outputs = |pipeline: Pipeline| -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut state = MemoryState::new();
        let outputs = records
            .iter()
            .enumerate()
            .flat_map(|(offset, record)| {
                let out = pipeline
                    .process(record.as_bytes(), 0, offset as i64, None, &mut state)
                    .unwrap();
                out.records.into_iter().map(|r| (r.key, r.value))
            })
            .collect();
        assert_eq!(state.entries().len(), keys.len(), "one count per key");
        outputs
    };
    let decoder = || RecordDecoder::new("k".to_string(), None);
    let native = outputs(Pipeline::new(decoder(), Box::new(CountProcessor)));
    assert_eq!(native.len(), records.len());
    assert!(
        native.contains(&(
            br#"say "hi""#.to_vec(),
            br#"{"key":"say \"hi\"","count":1}"#.to_vec()
        )),
        "the native output escapes the quote"
    );
    for guest in COUNT_GUESTS {
        let processor = module(guest).processor("", WasmLimits::default()).unwrap();
        let emitted = outputs(Pipeline::new(decoder(), Box::new(processor)));
        for (offset, (theirs, ours)) in emitted.iter().zip(&native).enumerate() {
            assert_eq!(
                (
                    String::from_utf8_lossy(&theirs.0),
                    String::from_utf8_lossy(&theirs.1)
                ),
                (
                    String::from_utf8_lossy(&ours.0),
                    String::from_utf8_lossy(&ours.1)
                ),
                "{guest} at offset {offset}"
            );
        }
        assert_eq!(emitted, native, "{guest}");
    }
}
