//! What a guest's calls reach: the task's state through a per-call write buffer, the output,
//! and a WASI that grants nothing real.
//!
//! The task's state is borrowed by `Processor::process` for one record, but a Wasmtime store's
//! data lives as long as the instance. So a call's reads reach the state through a scoped
//! thread-local ([`with_state`]), set on the task's thread for exactly the call: the guest runs
//! synchronously on that thread. Writes never reach it: they stay in [`HostData::writes`] until
//! the call succeeds, which is also what lets a failed call leave no trace.

use super::stderr::GuestStderr;
use super::streamkeeper::processor::{host, types};
use crate::processor::keys;
use crate::processor::state::{StateAccess, StateError};
use scoped_tls_hkt::scoped_thread_local;
use std::collections::BTreeMap;
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
    /// The state of the record being processed, for the call's reads.
    static TASK_STATE: for<'a> &'a dyn StateAccess
);

/// Runs `call` with `state` readable by the guest's host calls; they run on this thread,
/// inside `call`.
pub fn with_state<R>(state: &dyn StateAccess, call: impl FnOnce() -> R) -> R {
    TASK_STATE.set(state, call)
}

/// A store's data: the call's buffers, the sandbox's limits and WASI.
pub struct HostData {
    wasi: WasiCtx,
    table: ResourceTable,
    stderr: GuestStderr,
    memory_cap: u64,
    /// This call's writes, by stored key (`None`: deleted).
    pub writes: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// This call's output records.
    pub emitted: Vec<(Vec<u8>, Vec<u8>)>,
    /// Set when the call tried to grow memory past the cap.
    pub out_of_memory: bool,
    /// Set when a read of the task's state failed: the batch is aborted, not the record.
    pub state_failure: Option<StateError>,
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
            writes: BTreeMap::new(),
            emitted: Vec::new(),
            out_of_memory: false,
            state_failure: None,
        }
    }

    /// The end of what the guest wrote to stderr in this call, at most `most` bytes.
    pub fn stderr_tail(&self, most: usize) -> String {
        self.stderr.tail(most)
    }

    /// Forgets the call's buffers and marks (before the next call).
    pub fn reset(&mut self) {
        self.writes.clear();
        self.emitted.clear();
        self.out_of_memory = false;
        self.state_failure = None;
        self.stderr.clear();
    }

    /// Reads the task's state; a failed read fails the call (and is kept for the caller: it
    /// aborts the batch, it does not make the record bad).
    fn read<T>(
        &mut self,
        read: impl FnOnce(&dyn StateAccess) -> Result<T, StateError>,
    ) -> wasmtime::Result<T> {
        if !TASK_STATE.is_set() {
            // Only `init` runs outside a record.
            return Err(wasmtime::Error::msg(
                "the task's state is readable only while a record is processed, not in init",
            ));
        }
        TASK_STATE.with(|state| read(state)).map_err(|error| {
            let message = error.to_string();
            self.state_failure = Some(error);
            wasmtime::Error::msg(message)
        })
    }
}

/// `key` as stored.
pub fn stored(key: &[u8]) -> Vec<u8> {
    [keys::WASM_GUEST, key].concat()
}

impl host::Host for HostData {
    fn state_get(&mut self, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        let key = stored(&key);
        if let Some(written) = self.writes.get(&key) {
            return Ok(written.clone());
        }
        self.read(|state| state.get(&key))
    }

    fn state_put(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.writes.insert(stored(&key), Some(value));
        Ok(())
    }

    fn state_delete(&mut self, key: Vec<u8>) -> wasmtime::Result<()> {
        self.writes.insert(stored(&key), None);
        Ok(())
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
        // Deleted keys of this call may hide base entries: read as many more.
        let hidden = self
            .writes
            .range(from.clone()..to.clone())
            .filter(|(_, value)| value.is_none())
            .count();
        let base = self.read(|state| state.scan_limited(&from, &to, limit + hidden))?;
        let mut merged: BTreeMap<Vec<u8>, Vec<u8>> = base.into_iter().collect();
        for (key, value) in self.writes.range(from..to) {
            match value {
                Some(value) => merged.insert(key.clone(), value.clone()),
                None => merged.remove(key),
            };
        }
        Ok(merged
            .into_iter()
            .take(limit)
            .map(|(key, value)| (key[keys::WASM_GUEST.len()..].to_vec(), value))
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
