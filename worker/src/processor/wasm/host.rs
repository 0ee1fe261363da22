//! What a guest's calls reach: the task's state through a per-call write buffer and a read
//! bridge, the output, and a WASI that grants nothing real.
//!
//! The task's state is borrowed by `Processor::process` for one record, but a Wasmtime store's
//! data lives as long as the instance. So the guest's reads cross a bridge: a host function
//! leaves its read in [`Bridge`] and waits (the call's future is pending); the caller, which
//! holds the state, answers it and polls the call again. Writes never cross: they stay in
//! [`HostData::writes`] until the call succeeds, which is also what lets a failed call leave no
//! trace.

use super::streamkeeper::processor::{host, types};
use crate::processor::keys;
use crate::processor::state::{Entry, StateError};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::Poll;
use std::time::Duration;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::clocks::{HostMonotonicClock, HostWallClock};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::random::Deterministic;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

/// The most entries one `state-scan` returns.
pub const MAX_SCAN: u32 = 1000;
/// How much a guest may write to stderr per instance: what a trap's dead letter quotes (a
/// language runtime prints its exception there). Past it, the guest's writes fail.
const STDERR_CAPACITY: usize = 1 << 20;

/// A read the caller must answer from the task's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    Get(Vec<u8>),
    Scan {
        from: Vec<u8>,
        to: Vec<u8>,
        limit: usize,
    },
}

/// The caller's answer.
#[derive(Debug)]
pub enum Answer {
    Value(Option<Vec<u8>>),
    Entries(Vec<Entry>),
    Failed(StateError),
}

/// The read waiting for an answer, and the answer.
#[derive(Debug, Default)]
pub struct Bridge {
    read: Option<Read>,
    answer: Option<Answer>,
}

/// The bridge, shared by the store's data and the caller.
pub type SharedBridge = Arc<Mutex<Bridge>>;

fn lock(bridge: &SharedBridge) -> std::sync::MutexGuard<'_, Bridge> {
    bridge.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The read the guest waits on, if any (the caller answers it with [`answer`]).
pub fn pending_read(bridge: &SharedBridge) -> Option<Read> {
    lock(bridge).read.take()
}

/// Hands the guest the answer to its read.
pub fn answer(bridge: &SharedBridge, answer: Answer) {
    lock(bridge).answer = Some(answer);
}

/// Leaves `read` for the caller and waits for its answer.
async fn ask(bridge: &SharedBridge, read: Read) -> Answer {
    lock(bridge).read = Some(read);
    std::future::poll_fn(|_| match lock(bridge).answer.take() {
        Some(answer) => Poll::Ready(answer),
        None => Poll::Pending,
    })
    .await
}

/// A store's data: the call's buffers, the sandbox's limits and WASI.
pub struct HostData {
    wasi: WasiCtx,
    table: ResourceTable,
    stderr: MemoryOutputPipe,
    bridge: SharedBridge,
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

/// A clock that never moves: guests get no time but their records'.
struct Frozen;

impl HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for Frozen {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

impl HostData {
    pub fn new(bridge: SharedBridge, memory_cap: u64) -> Self {
        // No preopened directories, no environment, no arguments, no network (denied by
        // default), stdin and stdout closed, stderr kept for the dead letters; the clocks stand
        // still and randomness is a fixed sequence.
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        let wasi = WasiCtxBuilder::new()
            .stderr(stderr.clone())
            .wall_clock(Frozen)
            .monotonic_clock(Frozen)
            .secure_random(Deterministic::new(vec![0x5e, 0xed]))
            .insecure_random(Deterministic::new(vec![0x5e, 0xed]))
            .insecure_random_seed(0)
            .build();
        Self {
            wasi,
            table: ResourceTable::new(),
            stderr,
            bridge,
            memory_cap,
            writes: BTreeMap::new(),
            emitted: Vec::new(),
            out_of_memory: false,
            state_failure: None,
        }
    }

    /// How much the guest has written to stderr so far.
    pub fn stderr_len(&self) -> usize {
        self.stderr.contents().len()
    }

    /// What the guest wrote to stderr since `from`, its last lines.
    pub fn stderr_since(&self, from: usize, most: usize) -> String {
        let contents = self.stderr.contents();
        let written = String::from_utf8_lossy(contents.get(from..).unwrap_or_default());
        let written = written.trim_end();
        let start = written.len().saturating_sub(most);
        written[written.ceil_char_boundary(start)..].to_string()
    }

    /// Forgets the call's buffers and marks (before the next call).
    pub fn reset(&mut self) {
        self.writes.clear();
        self.emitted.clear();
        self.out_of_memory = false;
        self.state_failure = None;
    }

    async fn read(&mut self, read: Read) -> wasmtime::Result<Answer> {
        match ask(&self.bridge, read).await {
            Answer::Failed(error) => {
                let message = error.to_string();
                self.state_failure = Some(error);
                Err(wasmtime::Error::msg(message))
            }
            answer => Ok(answer),
        }
    }
}

/// `key` as stored.
pub fn stored(key: &[u8]) -> Vec<u8> {
    [keys::WASM_GUEST, key].concat()
}

impl host::Host for HostData {
    async fn state_get(&mut self, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        let key = stored(&key);
        if let Some(written) = self.writes.get(&key) {
            return Ok(written.clone());
        }
        match self.read(Read::Get(key)).await? {
            Answer::Value(value) => Ok(value),
            _ => Err(wasmtime::Error::msg("the host answered a get with entries")),
        }
    }

    async fn state_put(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.writes.insert(stored(&key), Some(value));
        Ok(())
    }

    async fn state_delete(&mut self, key: Vec<u8>) -> wasmtime::Result<()> {
        self.writes.insert(stored(&key), None);
        Ok(())
    }

    async fn state_scan(
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
        let written: Vec<(&Vec<u8>, &Option<Vec<u8>>)> =
            self.writes.range(from.clone()..to.clone()).collect();
        let hidden = written.iter().filter(|(_, v)| v.is_none()).count();
        let read = Read::Scan {
            from: from.clone(),
            to: to.clone(),
            limit: limit + hidden,
        };
        let base = match self.read(read).await? {
            Answer::Entries(entries) => entries,
            _ => {
                return Err(wasmtime::Error::msg(
                    "the host answered a scan with a value",
                ));
            }
        };
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

    async fn emit(&mut self, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.emitted.push((key, value));
        Ok(())
    }
}

impl types::Host for HostData {}

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
