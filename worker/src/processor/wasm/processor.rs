//! A task's instance of a WebAssembly processor, behind the [`Processor`] trait.

use super::host::{self, HostData};
use super::streamkeeper::processor::types::{Failure, InputRecord as GuestRecord};
use super::{Processor as Bindings, WasmError, WasmLimits, WasmModule};
use crate::processor::api::{ProcessError, Processor};
use crate::processor::decode::DecodeError;
use crate::processor::record::{InputRecord, OutputRecord, ProcessOutput};
use crate::processor::state::StateAccess;
use crate::processor::stream_time;
use std::sync::{Arc, Mutex, PoisonError};
use wasmtime::{Store, Trap};

/// Fuel for `init`: a language runtime's start-up may take far more than a record.
const INIT_FUEL: u64 = 20_000_000_000;
/// How much of a trap's text a dead letter keeps.
const MAX_DETAIL: usize = 1000;

/// One instance of the module for one task.
pub struct WasmProcessor {
    module: Arc<WasmModule>,
    config: String,
    limits: WasmLimits,
    /// The instance, replaced after a trap.
    live: Mutex<Live>,
}

struct Live {
    store: Store<HostData>,
    bindings: Bindings,
}

impl std::fmt::Debug for WasmProcessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmProcessor")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// Why a call failed.
enum CallError {
    /// The guest said `bad-record`.
    Refused(String),
    /// The call trapped, ran out of fuel or memory: the instance is spent.
    Trapped(DecodeError),
    /// Reading the task's state failed.
    State(crate::processor::state::StateError),
}

impl WasmProcessor {
    pub(super) fn new(
        module: Arc<WasmModule>,
        config: String,
        limits: WasmLimits,
    ) -> Result<Self, WasmError> {
        let live = instantiate(&module, &config, limits)?;
        Ok(Self {
            module,
            config,
            limits,
            live: Mutex::new(live),
        })
    }

    /// Calls the guest for `record` (and `advance` first when it moves stream time), its reads
    /// and writes reaching `state`; the call's output is left in the store's data.
    fn call(
        &self,
        live: &mut Live,
        record: &InputRecord<'_>,
        advance_to: Option<i64>,
        state: &mut dyn StateAccess,
    ) -> Result<(), CallError> {
        let Live { store, bindings } = live;
        store.data_mut().reset();
        store
            .set_fuel(self.limits.fuel_per_record)
            .map_err(|e| CallError::Trapped(trapped(&e, "")))?;
        let guest = GuestRecord {
            key: &record.key,
            value: record.raw,
            partition: record.partition,
            offset: record.offset,
            event_time_ms: record.event_time_ms,
            kafka_key: record.kafka.key,
            headers: record.kafka.headers,
            timestamp_ms: record.kafka.timestamp_ms,
        };
        // `Err(Ok(failure))`: the guest failed the record; `Err(Err(error))`: the call trapped.
        let outcome: Result<(), Result<Failure, wasmtime::Error>> = host::with_state(state, || {
            if let Some(time) = advance_to {
                bindings
                    .call_advance(&mut *store, time)
                    .map_err(Err)?
                    .map_err(Ok)?;
            }
            bindings
                .call_process(&mut *store, guest)
                .map_err(Err)?
                .map_err(Ok)
        });
        let data = store.data_mut();
        match outcome {
            Ok(()) => Ok(()),
            Err(Ok(Failure::BadRecord(reason))) => Err(CallError::Refused(reason)),
            Err(Err(error)) => Err(match data.state_failure.take() {
                Some(failure) => CallError::State(failure),
                None if data.out_of_memory => CallError::Trapped(DecodeError::GuestOutOfMemory {
                    bytes: self.limits.memory_bytes,
                }),
                None if error.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) => {
                    CallError::Trapped(DecodeError::GuestOutOfFuel {
                        fuel: self.limits.fuel_per_record,
                    })
                }
                None => CallError::Trapped(trapped(&error, &data.stderr_tail(MAX_DETAIL))),
            }),
        }
    }
}

/// A trap's dead-letter detail: what the guest last wrote to stderr (a language runtime's
/// exception), else Wasmtime's account of the trap, which starts with the guest's backtrace.
fn trapped(error: &wasmtime::Error, stderr: &str) -> DecodeError {
    let mut detail = if stderr.is_empty() {
        format!("{error:#}")
    } else {
        stderr.to_string()
    };
    detail.truncate(detail.floor_char_boundary(MAX_DETAIL));
    DecodeError::GuestTrapped { detail }
}

/// A new instance of `module`, initialised with `config`.
fn instantiate(module: &WasmModule, config: &str, limits: WasmLimits) -> Result<Live, WasmError> {
    let mut store = Store::new(&module.engine, HostData::new(limits.memory_bytes));
    store.limiter(|data| data);
    store.set_fuel(INIT_FUEL).map_err(WasmError::Instantiate)?;
    let bindings = module
        .pre
        .instantiate(&mut store)
        .map_err(WasmError::Instantiate)?;
    bindings
        .call_init(&mut store, config)
        .map_err(WasmError::Instantiate)?
        .map_err(WasmError::Refused)?;
    Ok(Live { store, bindings })
}

impl Processor for WasmProcessor {
    fn kind(&self) -> &'static str {
        "wasm"
    }

    fn process(
        &self,
        record: &InputRecord<'_>,
        state: &mut dyn StateAccess,
    ) -> Result<ProcessOutput, ProcessError> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        // The guest's writes reach `state` as it makes them; a record it fails is a bad record,
        // whose writes the task undoes (the `Processor` contract). Stream time is written once
        // the call succeeded. A record without an event time (a job with no `timeField`) cannot
        // move it, so its stored value is not read (a state read per record, in RocksDB).
        let advance_to = match record.event_time_ms {
            Some(time) => {
                let stream_time = stream_time::load(state)?;
                Some(time).filter(|&time| stream_time.is_none_or(|current| time > current))
            }
            None => None,
        };
        match self.call(&mut live, record, advance_to, state) {
            Ok(()) => {
                if let Some(time) = advance_to {
                    stream_time::advance(state, time)?;
                }
                let records = std::mem::take(&mut live.store.data_mut().emitted)
                    .into_iter()
                    .map(|(key, value)| OutputRecord { key, value })
                    .collect();
                Ok(ProcessOutput::emit(records))
            }
            Err(CallError::Refused(reason)) => Err(ProcessError::rejected(reason)),
            Err(CallError::State(error)) => Err(ProcessError::State(error)),
            Err(CallError::Trapped(reason)) => {
                // A trapped instance cannot be entered again: the next record gets a new one.
                *live = instantiate(&self.module, &self.config, self.limits)
                    .map_err(|e| ProcessError::Custom(Box::new(e)))?;
                Err(ProcessError::BadRecord(reason))
            }
        }
    }
}
