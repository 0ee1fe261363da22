//! What a guest's calls reach: the task's state, the output, and a WASI that grants nothing
//! real.
//!
//! The task's state is borrowed by `Processor::process` for one record, but a Wasmtime store's
//! data lives as long as the instance. So a call's reads and writes reach the state through a
//! scoped thread-local ([`with_state`]), set on the task's thread for exactly the call: the
//! guest runs synchronously on that thread. Writes go straight to the task's state (in the task,
//! its transaction's overlay): a call that fails leaves them to be undone as any refused
//! record's are (see `Processor`'s contract), so the guest's writes are buffered once, not twice.

use super::stderr::GuestStderr;
use super::streamkeeper::processor::{host, types};
use crate::processor::keys;
use crate::processor::state::{StateAccess, StateError};
use scoped_tls_hkt::scoped_thread_local;
use std::time::Duration;
use wasmtime::component::{HasData, Resource, ResourceTable};
use wasmtime_wasi::clocks::HostWallClock;
use wasmtime_wasi::p2::bindings::clocks::monotonic_clock;
use wasmtime_wasi::p2::{DynPollable, Pollable};
use wasmtime_wasi::random::Deterministic;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// The most entries one `state-scan` returns.
pub const MAX_SCAN: u32 = 1000;

scoped_thread_local!(
    /// The state of the record being processed, for the call's reads and writes.
    static mut TASK_STATE: for<'a> &'a mut dyn StateAccess
);

/// Runs `call` with `state` reachable by the guest's host calls; they run on this thread,
/// inside `call`.
pub fn with_state<R>(state: &mut dyn StateAccess, call: impl FnOnce() -> R) -> R {
    TASK_STATE.set(state, call)
}

/// A store's data: the call's buffers, the sandbox's limits and WASI.
pub struct HostData {
    wasi: WasiCtx,
    table: ResourceTable,
    stderr: GuestStderr,
    memory_cap: u64,
    /// This call's output records.
    pub emitted: Vec<(Vec<u8>, Vec<u8>)>,
    /// Set when the call tried to grow memory past the cap.
    pub out_of_memory: bool,
    /// Set when the task's state failed: the batch is aborted, not the record.
    pub state_failure: Option<StateError>,
    /// The stored form of the key being read or written (a key's own allocation, kept from
    /// call to call).
    stored_key: Vec<u8>,
}

/// A wall clock that never moves: guests get no time but their records'.
struct Frozen;

impl HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostData {
    pub fn new(memory_cap: u64) -> Self {
        // No preopened directories, no environment, no arguments, no network (denied by
        // default), stdin and stdout closed, stderr kept for the dead letters; the clocks stand
        // still (the monotonic one is [`StoppedClock`]) and randomness is a fixed sequence.
        let stderr = GuestStderr::default();
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .wall_clock(Frozen)
            .secure_random(Deterministic::new(vec![0x5e, 0xed]))
            .insecure_random(Deterministic::new(vec![0x5e, 0xed]))
            .insecure_random_seed(0)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            stderr,
            memory_cap,
            emitted: Vec::new(),
            out_of_memory: false,
            state_failure: None,
            stored_key: Vec::new(),
        }
    }

    /// The end of what the guest wrote to stderr in this call, at most `most` bytes.
    pub fn stderr_tail(&self, most: usize) -> String {
        self.stderr.tail(most)
    }

    /// Forgets the call's buffers and marks (before the next call).
    pub fn reset(&mut self) {
        self.emitted.clear();
        self.out_of_memory = false;
        self.state_failure = None;
        self.stderr.clear();
    }

    /// Uses the task's state; a failure of the state fails the call (and is kept for the
    /// caller: it aborts the batch, it does not make the record bad).
    fn on_state<T>(
        &mut self,
        operation: impl FnOnce(&mut dyn StateAccess) -> Result<T, StateError>,
    ) -> wasmtime::Result<T> {
        if !TASK_STATE.is_set() {
            // Only `init` runs outside a record.
            return Err(wasmtime::Error::msg(
                "the task's state is reachable only while a record is processed, not in init",
            ));
        }
        TASK_STATE.with(operation).map_err(|error| {
            let message = error.to_string();
            self.state_failure = Some(error);
            wasmtime::Error::msg(message)
        })
    }

    /// Runs `operation` with `key` in its stored form, built in a buffer kept from call to call
    /// (a key crossing costs no allocation of its own).
    fn with_stored<T>(&mut self, key: &[u8], operation: impl FnOnce(&mut Self, &[u8]) -> T) -> T {
        let mut stored_key = std::mem::take(&mut self.stored_key);
        stored_key.clear();
        stored_key.extend_from_slice(keys::WASM_GUEST);
        stored_key.extend_from_slice(key);
        let outcome = operation(self, &stored_key);
        self.stored_key = stored_key;
        outcome
    }
}

/// `key` as stored.
fn stored(key: &[u8]) -> Vec<u8> {
    [keys::WASM_GUEST, key].concat()
}

impl host::Host for HostData {
    fn state_get(&mut self, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        self.with_stored(&key, |host, key| host.on_state(|state| state.get(key)))
    }

    fn state_put(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.with_stored(&key, |host, key| {
            host.on_state(|state| state.put(key, value))
        })
    }

    fn state_delete(&mut self, key: Vec<u8>) -> wasmtime::Result<()> {
        self.with_stored(&key, |host, key| host.on_state(|state| state.delete(key)))
    }

    fn state_scan(
        &mut self,
        prefix: Vec<u8>,
        start_after: Option<Vec<u8>>,
        limit: u32,
    ) -> wasmtime::Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let limit = limit.min(MAX_SCAN) as usize;
        let stored_prefix = stored(&prefix);
        let from = match start_after {
            // The first key after `start-after`: itself followed by a zero byte.
            Some(after) if after.starts_with(&prefix) => [stored(&after), vec![0]].concat(),
            _ => stored_prefix.clone(),
        };
        let to = keys::prefix_end(&stored_prefix).unwrap_or_else(|| vec![u8::MAX; 64]);
        if limit == 0 || from >= to {
            return Ok(Vec::new());
        }
        let entries = self.on_state(|state| state.scan_limited(&from, &to, limit))?;
        Ok(entries
            .into_iter()
            .map(|(mut key, value)| {
                key.drain(..keys::WASM_GUEST.len());
                (key, value)
            })
            .collect())
    }

    fn emit(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.emitted.push((key, value));
        Ok(())
    }
}

impl types::Host for HostData {}

/// The monotonic clock a guest sees: it stands still at 0, so a sleep (a subscription to it)
/// is over at once. Nothing a guest calls waits: fuel alone bounds a call, and a guest that
/// waits for time to pass runs out of it.
pub struct StoppedClock<'a>(&'a mut ResourceTable);

impl HasData for StoppedClock<'static> {
    type Data<'a> = StoppedClock<'a>;
}

impl StoppedClock<'_> {
    /// The clock of a store's data, for the linker.
    pub fn of(data: &mut HostData) -> StoppedClock<'_> {
        StoppedClock(&mut data.table)
    }

    fn over_at_once(&mut self) -> wasmtime::Result<Resource<DynPollable>> {
        let over = self.0.push(Over)?;
        wasmtime_wasi::p2::subscribe(self.0, over)
    }
}

/// A subscription that is over as soon as it is made.
struct Over;

#[wasmtime_wasi::async_trait]
impl Pollable for Over {
    async fn ready(&mut self) {}
}

impl monotonic_clock::Host for StoppedClock<'_> {
    fn now(&mut self) -> wasmtime::Result<monotonic_clock::Instant> {
        Ok(0)
    }

    fn resolution(&mut self) -> wasmtime::Result<monotonic_clock::Duration> {
        Ok(1_000_000_000)
    }

    fn subscribe_instant(
        &mut self,
        _when: monotonic_clock::Instant,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.over_at_once()
    }

    fn subscribe_duration(
        &mut self,
        _duration: monotonic_clock::Duration,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        self.over_at_once()
    }
}

impl WasiView for HostData {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl wasmtime::ResourceLimiter for HostData {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if u64::try_from(desired).unwrap_or(u64::MAX) > self.memory_cap {
            self.out_of_memory = true;
            return Err(wasmtime::Error::msg(format!(
                "memory would grow to {desired} bytes, past the cap of {}",
                self.memory_cap
            )));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}
