//! WebAssembly processors, with a real guest: the Python velocity check
//! (`examples/wasm/python/app.py`, built by `examples/wasm/build.sh` with componentize-py).
//!
//! - It answers like the native velocity check, reading and writing state through the host.
//! - The sandbox holds: a record that loops forever runs out of fuel, one that allocates without
//!   end runs out of memory, one that raises traps; each is a bad record with that reason, its
//!   state changes are undone, and the next record runs on a fresh instance.
//! - Two instances fed the same records build the same state, byte for byte.
//! - A config the guest refuses is refused with its words.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, OnceLock};
use streamkeeper_worker::processor::wasm::{WasmError, WasmLimits, WasmModule};
use streamkeeper_worker::processor::{MemoryState, Pipeline, RecordDecoder};

/// The guests, built once per test binary.
fn guest(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let out = tempfile::tempdir().unwrap().keep();
        let status = Command::new(format!("{root}/examples/wasm/build.sh"))
            .arg(&out)
            .status()
            .unwrap();
        assert!(status.success(), "examples/wasm/build.sh failed");
        out
    });
    dir.join(format!("{name}.wasm"))
}

fn velocity_module() -> Arc<WasmModule> {
    static MODULE: OnceLock<Arc<WasmModule>> = OnceLock::new();
    MODULE
        .get_or_init(|| {
            let bytes = std::fs::read(guest("python-velocity")).unwrap();
            Arc::new(WasmModule::compile(&bytes).unwrap())
        })
        .clone()
}

const CONFIG: &str = r#"{"maxTransactions": 2, "windowMinutes": 10}"#;

fn pipeline(limits: WasmLimits) -> Pipeline {
    let processor = velocity_module().processor(CONFIG, limits).unwrap();
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
    match pipeline.process(json.as_bytes(), 0, offset, None, state) {
        Ok(out) => {
            assert_eq!(out.records.len(), 1);
            let answer: serde_json::Value = serde_json::from_slice(&out.records[0].value).unwrap();
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

fn minute(card: &str, minute: i64) -> String {
    format!(r#"{{"card":"{card}","ts":{}}}"#, minute * 60_000)
}

#[test]
fn the_python_guest_answers_like_the_native_velocity_check() {
    let pipeline = pipeline(WasmLimits::default());
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
        ]
    );
    let keys: Vec<Vec<u8>> = state.entries().keys().cloned().collect();
    assert_eq!(keys, [b"g/c1".to_vec(), b"mstream_time".to_vec()]);
}

#[test]
fn a_poisoned_record_is_a_bad_record_with_its_reason_and_leaves_no_trace() {
    let limits = WasmLimits {
        fuel_per_record: 200_000_000,
        memory_bytes: 128 << 20,
    };
    let pipeline = pipeline(limits);
    let mut state = MemoryState::new();
    assert_eq!(
        run(&pipeline, &mut state, 0, &minute("c1", 0)),
        Ok((1, false))
    );
    let before = state.clone();
    for (poison, reason) in [
        ("loop", "guest_out_of_fuel"),
        ("allocate", "guest_out_of_memory"),
        ("trap", "guest_trapped"),
    ] {
        let record = format!(r#"{{"card":"c1","ts":60000,"poison":"{poison}"}}"#);
        let error = run(&pipeline, &mut state, 1, &record).unwrap_err();
        assert!(error.starts_with(reason), "{poison}: {error}");
        assert_eq!(state, before, "{poison} left a trace in the state");
        // The next record runs on a fresh instance, from the state as it was.
        let mut probe = state.clone();
        assert_eq!(
            run(&pipeline, &mut probe, 2, &minute("c1", 1)),
            Ok((2, false))
        );
    }
    let error = run(
        &pipeline,
        &mut state,
        3,
        r#"{"card":"c1","ts":60000,"poison":"trap"}"#,
    )
    .unwrap_err();
    assert!(
        error.contains("poisoned record"),
        "the trap says why: {error}"
    );
}

#[test]
fn two_instances_fed_the_same_records_build_the_same_state() {
    let records: Vec<String> = (0..200)
        .map(|i| minute(&format!("c{}", i % 7), (i * 13) % 50))
        .collect();
    let states: Vec<MemoryState> = (0..2)
        .map(|_| {
            let pipeline = pipeline(WasmLimits::default());
            let mut state = MemoryState::new();
            for (offset, record) in records.iter().enumerate() {
                run(&pipeline, &mut state, offset as i64, record).unwrap();
            }
            state
        })
        .collect();
    assert_eq!(states[0], states[1]);
    assert_eq!(states[0].entries().len(), 8, "7 cards and the stream time");
}

#[test]
fn a_config_the_guest_refuses_is_refused_in_its_words() {
    let refused = velocity_module()
        .processor(
            r#"{"maxTransactions": 0, "windowMinutes": 1}"#,
            WasmLimits::default(),
        )
        .unwrap_err();
    assert!(
        matches!(&refused, WasmError::Refused(words) if words.contains("maxTransactions is 0")),
        "{refused}"
    );
    let not_a_component = WasmModule::compile(b"\0asm\x01\0\0\0").unwrap_err();
    assert!(
        matches!(not_a_component, WasmError::Compile(_)),
        "{not_a_component}"
    );
}
