//! One input record applied to the open transaction's overlay: its output, or why it is
//! refused.
//!
//! A refused record leaves no trace. A bad record (the processor's refusal, an undecodable
//! value, a WebAssembly guest that trapped or ran out of fuel or memory) and a record whose
//! derived records would not fit ([`record_size`]) have every write of theirs undone, while the
//! rest of the transaction stays as it was: the record goes to the dead-letter topic instead.
//! So a processor may write before it finds a record bad; a WebAssembly guest's writes reach the
//! overlay as it makes them, with no buffer of their own.

use super::record_size::{self, Oversized};
use crate::processor::{Pipeline, ProcessError, ProcessOutput, RawInput};
use crate::store::Overlay;

/// What one record did: its output, or the derived record that would not fit (both `Ok`: the
/// record was processed); `Err` is the processor's error. Anything but `Ok(Ok(_))` left no write
/// in `overlay`.
pub fn apply_record(
    pipeline: &Pipeline,
    input: &RawInput<'_>,
    overlay: &mut Overlay<'_>,
) -> Result<Result<ProcessOutput, Oversized>, ProcessError> {
    let result = pipeline.process_input(input, overlay).map(|output| {
        let lengths = output.records.iter().map(|r| (r.key.len(), r.value.len()));
        match record_size::first_oversized(lengths, overlay.written()) {
            None => Ok(output),
            Some(oversized) => Err(oversized),
        }
    });
    // Any other error aborts the whole transaction, so what the call wrote goes with it.
    if matches!(result, Ok(Err(_)) | Err(ProcessError::BadRecord(_))) {
        overlay.undo();
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::processor::{InputRecord, Processor, RecordDecoder, StateAccess, StateError};
    use crate::store::test_support::open_empty;
    use crate::store::{ChangeSet, StateStore};

    /// Writes its record's key, then refuses the record when its value says so.
    struct WritesFirst;

    impl Processor for WritesFirst {
        fn kind(&self) -> &'static str {
            "writes-first"
        }

        fn process(
            &self,
            record: &InputRecord<'_>,
            state: &mut dyn StateAccess,
        ) -> Result<ProcessOutput, ProcessError> {
            state.put(record.key.as_bytes(), b"written".to_vec())?;
            match record.value.get("refuse") {
                Some(_) => Err(ProcessError::rejected("refused after a write")),
                None if record.value.get("big").is_some() => {
                    state.put(b"big", vec![0; 2 << 20])?;
                    Ok(ProcessOutput::emit(Vec::new()))
                }
                None if record.value.get("fail").is_some() => {
                    Err(ProcessError::State(StateError::backend("get", "disk gone")))
                }
                None => Ok(ProcessOutput::emit(Vec::new())),
            }
        }
    }

    fn input(payload: &[u8]) -> RawInput<'_> {
        RawInput::left(payload, 0, 0, None)
    }

    fn keys(changes: &ChangeSet) -> Vec<String> {
        changes
            .iter()
            .map(|(key, _)| String::from_utf8_lossy(key).into_owned())
            .collect()
    }

    #[test]
    fn a_refused_or_oversized_record_leaves_no_trace_and_the_rest_stays() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_empty(dir.path(), 0);
        let pipeline = Pipeline::new(RecordDecoder::new("k", None), Box::new(WritesFirst));
        let mut overlay = Overlay::new(&store);
        let kept = apply_record(&pipeline, &input(br#"{"k":"a"}"#), &mut overlay);
        assert!(matches!(kept, Ok(Ok(_))), "{kept:?}");

        // Each is a new record of the same transaction, as the loop hands them over.
        let changes = overlay.into_changes();
        let mut overlay = Overlay::with_changes(&store, changes);
        let refused = apply_record(&pipeline, &input(br#"{"k":"b","refuse":1}"#), &mut overlay);
        assert!(
            matches!(refused, Err(ProcessError::BadRecord(_))),
            "{refused:?}"
        );
        let changes = overlay.into_changes();
        let mut overlay = Overlay::with_changes(&store, changes);
        let oversized = apply_record(&pipeline, &input(br#"{"k":"c","big":1}"#), &mut overlay);
        assert!(matches!(oversized, Ok(Err(_))), "{oversized:?}");
        assert_eq!(keys(overlay.changes()), ["a"]);
        assert_eq!(store.get(b"a").unwrap(), None, "nothing reaches the store");
    }

    #[test]
    fn an_error_that_aborts_the_transaction_is_left_to_the_abort() {
        let dir = tempfile::tempdir().unwrap();
        let store = open_empty(dir.path(), 0);
        let pipeline = Pipeline::new(RecordDecoder::new("k", None), Box::new(WritesFirst));
        let mut overlay = Overlay::new(&store);
        let failed = apply_record(&pipeline, &input(br#"{"k":"d","fail":1}"#), &mut overlay);
        assert!(matches!(failed, Err(ProcessError::State(_))), "{failed:?}");
        // The loop aborts the transaction and clears the overlay; nothing was undone here.
        assert_eq!(keys(overlay.changes()), ["d"]);
    }
}
