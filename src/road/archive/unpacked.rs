//! The unpacked bytes, inflated on a thread of their own a few buffers ahead of the tar
//! walk. With the [`Feed`](super::feed::Feed) that makes three stages (read and SHA-256;
//! inflate and CRC-32; walk and writes), each on its own thread, so on a two-CPU node the
//! inflate runs beside the writes instead of taking turns with them.
//!
//! Exposes the bytes like `BufRead` (`fill_buf`, `consume`), so the walk copies straight
//! from the inflate's buffers into the staged files; the used buffers go back to the
//! inflate. Once the stream failed, the failure is handed on once and the stream then
//! reads as ended, as [`Gunzip`] does. Dropping an [`Unpacked`] ends the inflate thread at
//! its next buffer.

use super::gzip::Gunzip;
use crate::reason::{Failure, ReasonCode};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::{Builder, Scope};

/// Bytes one inflate call may make.
const OUT_BUF: usize = 128 * 1024;
/// Buffers the inflate may be ahead of the walk: 1 MiB.
const AHEAD: usize = 8;

enum Message {
    /// A buffer and how many of its bytes are unpacked data (the rest is stale: buffers
    /// keep their full length, so reusing one costs no clearing).
    Data(Vec<u8>, usize),
    /// The member ended and checked out: the SHA-256 and length of the compressed input.
    End(Option<([u8; 32], u64)>),
    Failed(Failure),
}

/// The walk's end of the unpacked stream.
pub(super) struct Unpacked {
    chunks: Receiver<Message>,
    spare: SyncSender<Vec<u8>>,
    buf: Vec<u8>,
    len: usize,
    pos: usize,
    consumed: u64,
    digest: Option<([u8; 32], u64)>,
    /// The member ended or its failure was handed on: nothing more comes.
    ended: bool,
    name: String,
}

impl Unpacked {
    /// Starts inflating `gz` on a thread of `scope`.
    pub(super) fn start<'scope>(
        scope: &'scope Scope<'scope, '_>,
        gz: Gunzip<'scope>,
        name: &str,
    ) -> Result<Unpacked, Failure> {
        let (tx, chunks) = sync_channel(AHEAD);
        let (spare, spares) = sync_channel::<Vec<u8>>(AHEAD + 2);
        Builder::new()
            .name("archive-inflate".into())
            .spawn_scoped(scope, move || inflate(gz, &tx, &spares))
            .map_err(|e| {
                Failure::new(
                    ReasonCode::InternalError,
                    format!("{name}: cannot start the thread that inflates the archive: {e}"),
                )
            })?;
        Ok(Unpacked {
            chunks,
            spare,
            buf: Vec::new(),
            len: 0,
            pos: 0,
            consumed: 0,
            digest: None,
            ended: false,
            name: name.to_string(),
        })
    }

    /// The next unpacked bytes; empty once the member ended and its trailer checked out
    /// (or once a failure was handed on).
    pub(super) fn fill_buf(&mut self) -> Result<&[u8], Failure> {
        if self.pos == self.len && !self.ended {
            let message = self.chunks.recv().unwrap_or_else(|_| {
                Message::Failed(Failure::new(
                    ReasonCode::InternalError,
                    format!(
                        "{}: the thread inflating the archive ended without a word",
                        self.name
                    ),
                ))
            });
            match message {
                Message::Data(next, len) => {
                    let used = std::mem::replace(&mut self.buf, next);
                    // A full return queue or a finished inflate: the buffer is freed.
                    let _ = self.spare.try_send(used);
                    self.len = len;
                    self.pos = 0;
                }
                Message::End(digest) => {
                    self.digest = digest;
                    self.ended = true;
                    (self.len, self.pos) = (0, 0);
                }
                Message::Failed(failure) => {
                    self.ended = true;
                    (self.len, self.pos) = (0, 0);
                    return Err(failure);
                }
            }
        }
        Ok(&self.buf[self.pos..self.len])
    }

    /// Marks `n` bytes of the last [`fill_buf`](Self::fill_buf) as used.
    pub(super) fn consume(&mut self, n: usize) {
        let n = n.min(self.len - self.pos);
        self.pos += n;
        self.consumed += n as u64;
    }

    /// Unpacked bytes handed out so far: the offset in the tar stream, for messages.
    pub(super) fn position(&self) -> u64 {
        self.consumed
    }

    /// Reads on to the end without looking at the unpacked bytes, so that a failure found
    /// by the tar walk can be told apart from a damaged stream. Does nothing once the member
    /// ended or failed.
    pub(super) fn drain(&mut self) -> Result<(), Failure> {
        loop {
            let n = self.fill_buf()?.len();
            if n == 0 {
                return Ok(());
            }
            self.consume(n);
        }
    }

    /// The SHA-256 of the whole compressed input, and its length, once the member ended and
    /// checked out.
    pub(super) fn digest(&self) -> Option<([u8; 32], u64)> {
        self.digest
    }
}

/// The inflate thread: inflates until the member ends or fails; stops when the walk's end
/// is gone.
fn inflate(mut gz: Gunzip<'_>, tx: &SyncSender<Message>, spares: &Receiver<Vec<u8>>) {
    loop {
        let mut buf = spares.try_recv().unwrap_or_default();
        // Only a fresh buffer (or the empty one the other side started with) is short.
        buf.resize(buf.len().max(OUT_BUF), 0);
        let message = match gz.inflate_into(&mut buf) {
            Ok(0) => Message::End(gz.digest()),
            Ok(n) => Message::Data(buf, n),
            Err(failure) => Message::Failed(failure),
        };
        let last = !matches!(message, Message::Data(..));
        if tx.send(message).is_err() || last {
            return;
        }
    }
}
