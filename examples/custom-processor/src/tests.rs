use super::*;
use serde_json::{Value, json};
use streamkeeper_worker::MemoryState;

fn check(config: Value) -> Result<VelocityCheck, ConfigRefused> {
    VelocityCheck::from_settings(&CustomSettings::new(&config, "card", Some("ts")))
}

fn transaction<'a>(
    card: &str,
    at: i64,
    value: &'a serde_json::Map<String, Value>,
) -> InputRecord<'a> {
    InputRecord {
        side: Default::default(),
        key: card.into(),
        value: value.clone(),
        raw: b"",
        tombstone: false,
        partition: 0,
        offset: 0,
        event_time_ms: Some(at),
        kafka: Default::default(),
    }
}

/// `(recent, flagged)` of each transaction of one card at the given minutes.
fn verdicts(check: &VelocityCheck, minutes: &[i64]) -> Vec<(u64, bool)> {
    let mut state = MemoryState::new();
    let value = serde_json::Map::new();
    minutes
        .iter()
        .map(|&minute| {
            let out = check
                .process(&transaction("c1", minute * 60_000, &value), &mut state)
                .unwrap();
            let verdict: Value = serde_json::from_slice(&out.records[0].value).unwrap();
            assert_eq!(out.records[0].key, b"c1");
            (
                verdict["recent"].as_u64().unwrap(),
                verdict["flagged"].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn more_than_the_allowed_transactions_within_the_window_are_flagged() {
    let check = check(json!({"maxTransactions": 2, "windowMinutes": 10})).unwrap();
    assert_eq!(
        verdicts(&check, &[0, 1, 2, 11, 30, 31]),
        // The third within ten minutes is flagged; the window of minute 11 is (1, 11]: it
        // holds minute 2 and itself.
        [
            (1, false),
            (2, false),
            (3, true),
            (2, false),
            (1, false),
            (2, false)
        ]
    );
}

#[test]
fn a_late_transaction_is_counted_against_the_window_before_it() {
    let check = check(json!({"maxTransactions": 2, "windowMinutes": 10})).unwrap();
    // Minute 5 arrives after 20 and 21: the state keeps the two latest (20, 21), so it sees
    // none of the card's earlier traffic within its own window, and then 22 sees 20 and 21.
    assert_eq!(
        verdicts(&check, &[20, 21, 5, 22]),
        [(1, false), (2, false), (1, false), (3, true)]
    );
}

#[test]
fn the_output_carries_the_transaction_and_the_state_is_bounded() {
    let check = check(json!({"maxTransactions": 3, "windowMinutes": 1})).unwrap();
    let mut state = MemoryState::new();
    let value = json!({"card": "c1", "n": 7}).as_object().unwrap().clone();
    for at in 0..10 {
        let out = check
            .process(&transaction("c1", at, &value), &mut state)
            .unwrap();
        let verdict: Value = serde_json::from_slice(&out.records[0].value).unwrap();
        assert_eq!(verdict["transaction"]["n"], 7);
    }
    let stored = state.get(b"c1").unwrap().unwrap();
    assert_eq!(
        CardTimes::decode(&stored).unwrap(),
        CardTimes(vec![7, 8, 9])
    );
}

#[test]
fn the_state_format_round_trips_and_refuses_another() {
    let times = CardTimes(vec![-5, 0, 1_700_000_000_000]);
    assert_eq!(CardTimes::decode(&times.encode()).unwrap(), times);
    assert_eq!(
        CardTimes::decode(&[CardTimes::FORMAT]).unwrap(),
        CardTimes::default()
    );
    assert!(matches!(
        CardTimes::decode(&[2, 0, 0, 0, 0, 0, 0, 0, 1]),
        Err(StateCodecError::UnknownVersion { found: 2, .. })
    ));
    assert!(matches!(
        CardTimes::decode(&[CardTimes::FORMAT, 1, 2]),
        Err(StateCodecError::BadValue { .. })
    ));
    assert!(matches!(
        CardTimes::decode(&[]),
        Err(StateCodecError::Empty)
    ));
    let mut state = MemoryState::new();
    state.put(b"c1", vec![9]).unwrap();
    let check = check(json!({"maxTransactions": 1, "windowMinutes": 1})).unwrap();
    let value = serde_json::Map::new();
    let error = check
        .process(&transaction("c1", 0, &value), &mut state)
        .unwrap_err();
    assert_eq!(error.category(), "corrupt_state");
}

#[test]
fn settings_that_cannot_run_are_refused_in_words() {
    let refused = |config: Value| check(config).unwrap_err().to_string();
    assert!(
        refused(json!({"maxTransactions": 0, "windowMinutes": 1})).contains("maxTransactions is 0")
    );
    assert!(refused(json!({"maxTransactions": 3, "windowMinutes": 0})).contains("windowMinutes"));
    assert!(refused(json!({"maxTransactions": 3})).contains("windowMinutes"));
    assert!(
        refused(json!({"maxTransactions": 3, "windowMinutes": 1, "windowHours": 2}))
            .contains("windowHours")
    );
    let config = json!({"maxTransactions": 3, "windowMinutes": 1});
    let untimed = VelocityCheck::from_settings(&CustomSettings::new(&config, "card", None));
    assert!(untimed.unwrap_err().to_string().contains("timeField"));
}
