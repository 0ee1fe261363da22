//! The `count` processor: a running count of records per key.
//!
//! State: `c<key>` → [`CountState`]. Output per record: key = the record key, value =
//! `{"key":<key>,"count":<n>}` with the count after this record.

use serde::Serialize;

use super::api::{ProcessError, Processor};
use super::codec::CountState;
use super::keys;
use super::record::{InputRecord, OutputRecord, ProcessOutput};
use super::state::StateAccess;

/// Counts records per key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CountProcessor;

#[derive(Serialize)]
struct CountUpdate<'a> {
    key: &'a str,
    count: u64,
}

impl Processor for CountProcessor {
    fn kind(&self) -> &'static str {
        "count"
    }

    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let key = keys::count_key(&record.key);
        let previous = match state.get(&key)? {
            Some(bytes) => {
                CountState::decode(&bytes)
                    .map_err(|e| ProcessError::corrupt(&key, e))?
                    .count
            }
            None => 0,
        };
        let next = CountState {
            count: previous.saturating_add(1),
        };
        state.put(&key, next.encode())?;
        let value = serde_json::to_vec(&CountUpdate {
            key: &record.key,
            count: next.count,
        })
        .map_err(ProcessError::Encode)?;
        Ok(ProcessOutput::emit(vec![OutputRecord {
            key: record.key.as_bytes().to_vec(),
            value,
        }]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::decode::RecordDecoder;
    use crate::processor::state::MemoryState;

    fn run(state: &mut MemoryState, raw: &str) -> Result<ProcessOutput, ProcessError> {
        let record = RecordDecoder::new("k", None)
            .decode(raw.as_bytes(), 0, 0)
            .unwrap();
        CountProcessor.process(&record, state)
    }

    #[test]
    fn counts_per_key_and_emits_each_update() {
        let mut s = MemoryState::new();
        let outs: Vec<String> = [r#"{"k":"a"}"#, r#"{"k":"b"}"#, r#"{"k":"a"}"#, r#"{"k":1}"#]
            .iter()
            .map(|raw| {
                let out = run(&mut s, raw).unwrap();
                assert_eq!(out.records.len(), 1);
                String::from_utf8(out.records[0].value.clone()).unwrap()
            })
            .collect();
        assert_eq!(
            outs,
            vec![
                r#"{"key":"a","count":1}"#,
                r#"{"key":"b","count":1}"#,
                r#"{"key":"a","count":2}"#,
                r#"{"key":"1","count":1}"#,
            ]
        );
        assert_eq!(
            s.get(b"ca").unwrap(),
            Some(CountState { count: 2 }.encode())
        );
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn output_key_is_the_record_key() {
        let mut s = MemoryState::new();
        let out = run(&mut s, r#"{"k":"user-7"}"#).unwrap();
        assert_eq!(out.records[0].key, b"user-7".to_vec());
        assert_eq!(out.dropped, None);
    }

    #[test]
    fn unreadable_state_stops_instead_of_overwriting() {
        let mut s = MemoryState::new();
        s.put(b"ca", vec![7]).unwrap();
        let err = run(&mut s, r#"{"k":"a"}"#).unwrap_err();
        assert_eq!(err.category(), "corrupt_state");
        assert_eq!(s.get(b"ca").unwrap(), Some(vec![7]), "state left untouched");
    }
}
