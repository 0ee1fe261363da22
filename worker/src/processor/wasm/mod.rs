//! WebAssembly processors: a processor compiled to a WebAssembly component against
//! `wit/processor.wit`, run by Wasmtime inside the task, sandboxed.
//!
//! - **Compiled once per worker** ([`WasmModule::compile`]); each task instantiates it and
//!   calls `init(config)` once ([`WasmModule::processor`]), then `process` per record.
//! - **Exactly once like any processor.** A call's state writes go to the task's overlay as the
//!   guest makes them, its output is handed over when the call succeeds: a record the guest
//!   refuses (`bad-record`), or whose call traps, runs out of fuel or out of memory, is a bad
//!   record: it goes to the dead-letter topic with that reason, the task undoes its writes (as
//!   it does any bad record's), and goes on.
//! - **Sandboxed.** Each record gets a fuel budget, each instance a memory cap; the guest gets
//!   no files, network, clock (it reads 0, and a sleep is over at once) or randomness (a fixed
//!   sequence), so replay, standbys and restores run it to the same state. Nothing a guest calls
//!   waits, so fuel alone bounds a call, and the guest runs synchronously on the task's thread.
//! - **Its own key space.** A guest's keys are stored under `g/` (`keys::WASM_GUEST`); the host
//!   keeps the task's stream time where the built-in processors do (`stream_time`) and calls
//!   `advance` before a record that moves it.

mod host;
mod processor;
mod stderr;

pub use processor::WasmProcessor;

use host::{HostData, StoppedClock};
use std::sync::Arc;
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine};

wasmtime::component::bindgen!({
    path: "../wit",
    world: "processor",
    imports: { default: trappable },
    // The record is lowered into the guest straight from the task's borrowed bytes.
    ownership: Borrowing { duplicate_if_necessary: false },
});

/// The sandbox's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmLimits {
    /// Fuel (about one unit per WebAssembly instruction) a record's calls may burn.
    pub fuel_per_record: u64,
    /// The most linear memory an instance may have, in bytes.
    pub memory_bytes: u64,
}

impl Default for WasmLimits {
    fn default() -> Self {
        Self {
            fuel_per_record: 100_000_000,
            memory_bytes: 256 << 20,
        }
    }
}

/// The interface this worker offers guests, as `wit/processor.wit` declares it.
pub const INTERFACE: &str = "streamkeeper:processor@0.2.0";

/// Why a WebAssembly processor cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum WasmError {
    #[error("the module is not a WebAssembly component this worker runs: {0:#}")]
    Compile(#[source] wasmtime::Error),
    #[error(
        "the module does not fit the worker's interface (wit/processor.wit, {INTERFACE}): {0:#}"
    )]
    Link(#[source] wasmtime::Error),
    #[error("instantiating the module failed: {0:#}")]
    Instantiate(#[source] wasmtime::Error),
    #[error("the module refused its config: {0}")]
    Refused(String),
}

/// A compiled component, ready to be instantiated by each task.
#[derive(Clone)]
pub struct WasmModule {
    engine: Engine,
    pre: ProcessorPre<HostData>,
}

impl std::fmt::Debug for WasmModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WasmModule").finish_non_exhaustive()
    }
}

impl WasmModule {
    /// Compiles `bytes` (a component) and links it to the host: once per worker.
    pub fn compile(bytes: &[u8]) -> Result<Self, WasmError> {
        let mut config = Config::new();
        config.consume_fuel(true);
        // Deterministic floats: a NaN's bits do not depend on the machine.
        config.cranelift_nan_canonicalization(true);
        let engine = Engine::new(&config).map_err(WasmError::Compile)?;
        let component = Component::new(&engine, bytes).map_err(WasmError::Compile)?;
        let mut linker = Linker::<HostData>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(WasmError::Link)?;
        // WASI's monotonic clock, replaced by one that stands still.
        linker.allow_shadowing(true);
        wasmtime_wasi::p2::bindings::clocks::monotonic_clock::add_to_linker::<_, StoppedClock>(
            &mut linker,
            StoppedClock::of,
        )
        .map_err(WasmError::Link)?;
        linker.allow_shadowing(false);
        Processor::add_to_linker::<_, wasmtime::component::HasSelf<HostData>>(
            &mut linker,
            |data| data,
        )
        .map_err(WasmError::Link)?;
        let pre = linker
            .instantiate_pre(&component)
            .map_err(WasmError::Link)
            .and_then(|pre| ProcessorPre::new(pre).map_err(WasmError::Link))?;
        Ok(Self { engine, pre })
    }

    /// A task's processor: a new instance, initialised with `config` (JSON text).
    pub fn processor(
        self: &Arc<Self>,
        config: &str,
        limits: WasmLimits,
    ) -> Result<WasmProcessor, WasmError> {
        WasmProcessor::new(Arc::clone(self), config.to_string(), limits)
    }
}

#[cfg(test)]
mod tests {
    use super::INTERFACE;

    #[test]
    fn the_interface_named_is_the_one_the_wit_declares() {
        let wit = include_str!("../../../../wit/processor.wit");
        assert!(
            wit.lines()
                .any(|line| line == format!("package {INTERFACE};")),
            "wit/processor.wit does not declare {INTERFACE}"
        );
    }
}
