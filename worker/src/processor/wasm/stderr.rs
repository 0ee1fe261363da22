//! A guest's stderr: kept per call, for the dead letter of a call that traps (a language
//! runtime prints its exception there).
//!
//! WASI's own memory pipe keeps everything an instance ever wrote and can only be read whole,
//! by a copy: reading where a call started would copy all of it on every record. This one is
//! emptied before each call instead, so a call's stderr is the buffer itself.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamError, StreamResult};

/// What one call may write to stderr; past it the guest's write traps (so a guest that floods
/// stderr is a bad record, not a memory hog).
pub const CAPACITY: usize = 1 << 20;

/// The stderr of one instance; clones share the buffer.
#[derive(Clone, Default)]
pub struct GuestStderr {
    written: Arc<Mutex<Vec<u8>>>,
}

impl GuestStderr {
    fn buffer(&self) -> MutexGuard<'_, Vec<u8>> {
        self.written.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets what earlier calls wrote (before a call).
    pub fn clear(&self) {
        self.buffer().clear();
    }

    /// The last `most` bytes (on a character boundary) of what this call wrote, its trailing
    /// blank lines left out.
    pub fn tail(&self, most: usize) -> String {
        let buffer = self.buffer();
        let written = String::from_utf8_lossy(&buffer);
        let written = written.trim_end();
        let start = written.len().saturating_sub(most);
        written[written.ceil_char_boundary(start)..].to_string()
    }

    /// Appends as much of `bytes` as fits; how much that was.
    fn append(&self, bytes: &[u8]) -> usize {
        let mut buffer = self.buffer();
        let fits = bytes.len().min(CAPACITY.saturating_sub(buffer.len()));
        buffer.extend_from_slice(&bytes[..fits]);
        fits
    }
}

impl OutputStream for GuestStderr {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        if self.append(&bytes) < bytes.len() {
            return Err(StreamError::Trap(wasmtime::Error::msg(format!(
                "the guest wrote more than {CAPACITY} bytes to stderr in one call"
            ))));
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        match CAPACITY.saturating_sub(self.buffer().len()) {
            0 => Err(StreamError::Closed),
            room => Ok(room),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for GuestStderr {
    async fn ready(&mut self) {}
}

impl AsyncWrite for GuestStderr {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(self.append(bytes)))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl IsTerminal for GuestStderr {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for GuestStderr {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_sees_only_its_own_writes_and_no_more_than_the_capacity() {
        let mut stderr = GuestStderr::default();
        OutputStream::write(&mut stderr, bytes::Bytes::from_static(b"an earlier call\n")).unwrap();
        stderr.clear();
        OutputStream::write(
            &mut stderr,
            bytes::Bytes::from_static(b"Traceback: boom\n\n"),
        )
        .unwrap();
        assert_eq!(stderr.tail(1000), "Traceback: boom");
        assert_eq!(stderr.tail(4), "boom");

        let flood = bytes::Bytes::from(vec![b'x'; CAPACITY]);
        assert!(OutputStream::write(&mut stderr, flood).is_err());
        assert_eq!(stderr.buffer().len(), CAPACITY);
        assert!(matches!(stderr.check_write(), Err(StreamError::Closed)));
        stderr.clear();
        assert_eq!(stderr.check_write().unwrap(), CAPACITY);
    }
}
