//! A task's instance of a WebAssembly processor, behind the [`Processor`] trait.

use super::host::{self, Answer, HostData, Read, SharedBridge};
use super::streamkeeper::processor::types::{Failure, InputRecord as GuestRecord};
use super::{Processor as Bindings, WasmError, WasmLimits, WasmModule};
use crate::processor::api::{ProcessError, Processor};
use crate::processor::decode::DecodeError;
use crate::processor::record::{InputRecord, OutputRecord, ProcessOutput};
use crate::processor::state::StateAccess;
use crate::processor::stream_time;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
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
    bridge: SharedBridge,
    /// Each call and the current thread's runtime that drives it.
    live: Mutex<Live>,
}

struct Live {
    store: Store<HostData>,
    bindings: Bindings,
    /// Drives a call's future: WASI's host functions may wait on Tokio (a guest's sleep).
    runtime: tokio::runtime::Runtime,
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
    /// The call trapped, ran out of fuel, memory or time: the instance is spent.
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
        let bridge = SharedBridge::default();
        let live = instantiate(&module, &bridge, &config, limits)?;
        Ok(Self {
            module,
            config,
            limits,
            bridge,
            live: Mutex::new(live),
        })
    }

    /// Calls the guest for `record` (and `advance` first when it moves stream time), answering
    /// its reads from `state`; the call's writes and output when it succeeds.
    fn call(
        &self,
        live: &mut Live,
        record: &InputRecord<'_>,
        advance_to: Option<i64>,
        state: &mut dyn StateAccess,
    ) -> Result<(), CallError> {
        let Live {
            store,
            bindings,
            runtime,
        } = live;
        store.data_mut().reset();
        let stderr_from = store.data().stderr_len();
        store
            .set_fuel(self.limits.fuel_per_record)
            .map_err(|e| CallError::Trapped(trapped(&e, "")))?;
        let guest = GuestRecord {
            key: record.key.clone(),
            value: record.raw.to_vec(),
            partition: record.partition,
            offset: record.offset,
            event_time_ms: record.event_time_ms,
            kafka_key: record.kafka.key.map(<[u8]>::to_vec),
            headers: record
                .kafka
                .headers
                .iter()
                .map(|(name, value)| ((*name).to_string(), value.map(<[u8]>::to_vec)))
                .collect(),
            timestamp_ms: record.kafka.timestamp_ms,
        };
        let bridge = &self.bridge;
        let deadline = self.limits.wall_clock_limit();
        let call = async {
            if let Some(time) = advance_to {
                let advanced = drive(bridge, state, bindings.call_advance(&mut *store, time)).await;
                match advanced {
                    Ok(Ok(())) => {}
                    Ok(Err(failure)) => return Ok(Err(failure)),
                    Err(error) => return Err(error),
                }
            }
            drive(bridge, state, bindings.call_process(&mut *store, &guest)).await
        };
        let outcome = run_to_end(runtime, call, deadline);
        let data = store.data_mut();
        let Some(outcome) = outcome else {
            // The call was dropped mid-way: the instance is spent, like after a trap.
            return Err(CallError::Trapped(DecodeError::GuestTimedOut {
                millis: deadline.as_millis(),
            }));
        };
        match outcome {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Failure::BadRecord(reason))) => Err(CallError::Refused(reason)),
            Err(error) => Err(match data.state_failure.take() {
                Some(failure) => CallError::State(failure),
                None if data.out_of_memory => CallError::Trapped(DecodeError::GuestOutOfMemory {
                    bytes: self.limits.memory_bytes,
                }),
                None if error.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) => {
                    CallError::Trapped(DecodeError::GuestOutOfFuel {
                        fuel: self.limits.fuel_per_record,
                    })
                }
                None => {
                    CallError::Trapped(trapped(&error, &data.stderr_since(stderr_from, MAX_DETAIL)))
                }
            }),
        }
    }
}

/// Runs `call` to its end within `deadline` (`None` past it). Most calls wait on nothing but
/// the task's state, which `drive` answers in place: they are polled once, in the runtime's
/// context, with no timer and no `block_on`. A call that waits on something else (a WASI timer)
/// goes on in the runtime, with the deadline counted from the call's start.
fn run_to_end<T>(
    runtime: &tokio::runtime::Runtime,
    call: impl Future<Output = T>,
    deadline: std::time::Duration,
) -> Option<T> {
    let started = tokio::time::Instant::now();
    let mut call = pin!(call);
    let first = {
        let _context = runtime.enter();
        call.as_mut()
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    };
    match first {
        Poll::Ready(outcome) => Some(outcome),
        Poll::Pending => runtime
            .block_on(async { tokio::time::timeout_at(started + deadline, call).await })
            .ok(),
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

/// Polls `call` to its end, answering each read it waits on from `state` and polling it again
/// at once: only a wait on something else (a WASI timer) leaves it to the runtime.
async fn drive<T>(
    bridge: &SharedBridge,
    state: &mut dyn StateAccess,
    call: impl Future<Output = wasmtime::Result<T>>,
) -> wasmtime::Result<T> {
    let mut call = pin!(call);
    std::future::poll_fn(|cx| {
        loop {
            if let Poll::Ready(result) = call.as_mut().poll(cx) {
                return Poll::Ready(result);
            }
            match host::pending_read(bridge) {
                Some(read) => host::answer(bridge, serve(read, state)),
                None => return Poll::Pending,
            }
        }
    })
    .await
}

fn serve(read: Read, state: &mut dyn StateAccess) -> Answer {
    let answered = match read {
        Read::Get(key) => state.get(&key).map(Answer::Value),
        Read::Scan { from, to, limit } => {
            state.scan_limited(&from, &to, limit).map(Answer::Entries)
        }
    };
    answered.unwrap_or_else(Answer::Failed)
}

/// A new instance of `module`, initialised with `config`.
fn instantiate(
    module: &WasmModule,
    bridge: &SharedBridge,
    config: &str,
    limits: WasmLimits,
) -> Result<Live, WasmError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| WasmError::Instantiate(wasmtime::Error::msg(e.to_string())))?;
    let mut store = Store::new(
        &module.engine,
        HostData::new(Arc::clone(bridge), limits.memory_bytes),
    );
    store.limiter(|data| data);
    store.set_fuel(INIT_FUEL).map_err(WasmError::Instantiate)?;
    let bindings = runtime
        .block_on(module.pre.instantiate_async(&mut store))
        .map_err(WasmError::Instantiate)?;
    runtime
        .block_on(bindings.call_init(&mut store, config))
        .map_err(WasmError::Instantiate)?
        .map_err(WasmError::Refused)?;
    Ok(Live {
        store,
        bindings,
        runtime,
    })
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
        // Stream time is only written once the call succeeded: a record the guest fails must
        // leave no trace.
        let stream_time = stream_time::load(state)?;
        let advance_to = record
            .event_time_ms
            .filter(|&time| stream_time.is_none_or(|current| time > current));
        match self.call(&mut live, record, advance_to, state) {
            Ok(()) => {
                let data = live.store.data_mut();
                for (key, value) in std::mem::take(&mut data.writes) {
                    match value {
                        Some(value) => state.put(&key, value)?,
                        None => state.delete(&key)?,
                    }
                }
                if let Some(time) = advance_to {
                    stream_time::advance(state, time)?;
                }
                let records = std::mem::take(&mut data.emitted)
                    .into_iter()
                    .map(|(key, value)| OutputRecord { key, value })
                    .collect();
                Ok(ProcessOutput::emit(records))
            }
            Err(CallError::Refused(reason)) => Err(ProcessError::rejected(reason)),
            Err(CallError::State(error)) => Err(ProcessError::State(error)),
            Err(CallError::Trapped(reason)) => {
                // A trapped instance cannot be entered again: the next record gets a new one.
                *live = instantiate(&self.module, &self.bridge, &self.config, self.limits)
                    .map_err(|e| ProcessError::Custom(Box::new(e)))?;
                Err(ProcessError::BadRecord(reason))
            }
        }
    }
}
