//! The streamkeeper worker: exactly-once stateful processing of Kafka records.
//!
//! `processor` holds the pure processing logic (decoding, the built-in processors, state
//! encodings) behind the [`processor::Processor`] trait; it knows nothing of Kafka or RocksDB.

pub mod processor;
