//! The compressed bytes, read and hashed on a thread of their own a few buffers ahead of
//! the inflate. On a node with two CPUs (the platform's etcd VMs, a TCG guest here) the
//! drive's reads and the SHA-256 then run beside the inflate, the CRC-32 and the writes
//! instead of taking turns with them: under TCG the SHA-256 of a 3.5 release is about a
//! tenth of the pass (docs/measurements.md, "The archive pass on the node").
//!
//! The reader sees every byte once, in order, and hands over whole buffers (no copy); the
//! inflate side gives the used ones back. The SHA-256 comes with the end of the input, so
//! a digest exists only for input read to its end. When the pass stops early (a corrupt
//! or oversized stream: a refused entry still reads on to the end), dropping the [`Feed`]
//! ends the reader at its next buffer; the pass returns once the reader's read in flight
//! returns. A file or a disc answers that read at once; a pipe's writer may stall without
//! closing it, so a pipe is read [`inline`](Feed::inline) instead: on the inflate's
//! thread, when it needs bytes, as the pass on one thread read, and its verdict on a
//! corrupt stream never waits for a read.

use sha2::{Digest, Sha256};
use std::io::{self, Read};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::thread::{Builder, Scope};

/// Bytes a read asks for.
const CHUNK: usize = 64 * 1024;
/// Buffers the reader may be ahead of the inflate: 1 MiB.
const AHEAD: usize = 16;

enum Message {
    /// A buffer and how many of its bytes were read (buffers keep their full length, so
    /// reusing one costs no clearing).
    Data(Vec<u8>, usize),
    End {
        sha256: [u8; 32],
    },
    Failed(io::Error),
}

/// The receiving end: the next buffer of input, in order.
pub(super) struct Feed<'a> {
    how: How<'a>,
}

enum How<'a> {
    /// A reader thread, a few buffers ahead.
    Ahead {
        chunks: Receiver<Message>,
        spare: SyncSender<Vec<u8>>,
    },
    /// Read and hashed on the caller's thread, when asked ([`Feed::inline`]).
    Inline {
        input: Box<dyn Read + Send + 'a>,
        sha: Sha256,
        spare: Option<Vec<u8>>,
    },
}

/// What [`Feed::next`] found.
pub(super) enum Next {
    /// A buffer and how many of its first bytes are the next input, never 0.
    Data(Vec<u8>, usize),
    /// The input ended; the SHA-256 of all of it.
    End([u8; 32]),
}

impl<'a> Feed<'a> {
    /// Starts the reader of `input` on a thread of `scope`.
    pub(super) fn start<R: Read + Send + 'a>(
        scope: &'a Scope<'a, '_>,
        input: R,
    ) -> io::Result<Self> {
        let (tx, chunks) = sync_channel(AHEAD);
        let (spare, spares) = sync_channel::<Vec<u8>>(AHEAD + 2);
        Builder::new()
            .name("archive-read".into())
            .spawn_scoped(scope, move || read_ahead(input, &tx, &spares))?;
        Ok(Feed {
            how: How::Ahead { chunks, spare },
        })
    }

    /// Reads `input` only when asked, on the asking thread: for a pipe, whose writer may
    /// stall, so that a pass that stopped early never waits for a read in flight.
    pub(super) fn inline(input: impl Read + Send + 'a) -> Feed<'a> {
        Feed {
            how: How::Inline {
                input: Box::new(input),
                sha: Sha256::new(),
                spare: None,
            },
        }
    }

    /// The next buffer of input; blocks until the reader has it.
    pub(super) fn next(&mut self) -> io::Result<Next> {
        match &mut self.how {
            How::Ahead { chunks, .. } => match chunks.recv() {
                Ok(Message::Data(buf, n)) => Ok(Next::Data(buf, n)),
                Ok(Message::End { sha256 }) => Ok(Next::End(sha256)),
                Ok(Message::Failed(e)) => Err(e),
                Err(_) => Err(io::Error::other(
                    "the archive's reader thread ended without a word",
                )),
            },
            How::Inline { input, sha, spare } => {
                let mut buf = spare.take().unwrap_or_default();
                buf.resize(buf.len().max(CHUNK), 0);
                match read_some(input, &mut buf)? {
                    0 => Ok(Next::End(sha.clone().finalize().into())),
                    n => {
                        sha.update(&buf[..n]);
                        Ok(Next::Data(buf, n))
                    }
                }
            }
        }
    }

    /// Gives a used buffer back to the reader.
    pub(super) fn recycle(&mut self, buf: Vec<u8>) {
        match &mut self.how {
            // A full return queue or a finished reader: the buffer is simply freed.
            How::Ahead { spare, .. } => {
                let _ = spare.try_send(buf);
            }
            How::Inline { spare, .. } => *spare = Some(buf),
        }
    }
}

/// One read of `input` into `buf`, again when interrupted.
fn read_some(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match input.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// The reader: reads `input` to its end, hashing as it goes; stops when the receiver is
/// gone.
fn read_ahead(mut input: impl Read, tx: &SyncSender<Message>, spares: &Receiver<Vec<u8>>) {
    let mut sha = Sha256::new();
    loop {
        let mut buf = spares.try_recv().unwrap_or_default();
        // Only a fresh buffer (or the empty one the other side started with) is short.
        buf.resize(buf.len().max(CHUNK), 0);
        let n = match read_some(&mut input, &mut buf) {
            Ok(n) => n,
            Err(e) => {
                let _ = tx.send(Message::Failed(e));
                return;
            }
        };
        if n == 0 {
            let _ = tx.send(Message::End {
                sha256: sha.finalize().into(),
            });
            return;
        }
        sha.update(&buf[..n]);
        if tx.send(Message::Data(buf, n)).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `data` through a feed in reads of `step` bytes; returns what came and the
    /// digest.
    fn through(data: &[u8], step: usize, ahead: bool) -> (Vec<u8>, [u8; 32]) {
        std::thread::scope(|s| {
            let mut feed = if ahead {
                Feed::start(s, Stepped(data, step)).unwrap()
            } else {
                Feed::inline(Stepped(data, step))
            };
            let mut got = Vec::new();
            loop {
                match feed.next().unwrap() {
                    Next::Data(buf, n) => {
                        assert!(n > 0, "an empty buffer before the end");
                        got.extend_from_slice(&buf[..n]);
                        feed.recycle(buf);
                    }
                    Next::End(sha) => return (got, sha),
                }
            }
        })
    }

    struct Stepped<'a>(&'a [u8], usize);
    impl Read for Stepped<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(self.1).min(buf.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn every_byte_comes_once_in_order_with_the_digest_of_all_of_them() {
        let data: Vec<u8> = (0..(3 * CHUNK * AHEAD + 12_345))
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        for ahead in [true, false] {
            for step in [1 << 20, CHUNK, 4096, 1000] {
                let (got, sha) = through(&data, step, ahead);
                assert_eq!(got.len(), data.len(), "reads of {step}, ahead {ahead}");
                assert!(
                    got == data,
                    "reads of {step}, ahead {ahead}: the bytes differ"
                );
                assert_eq!(sha, <[u8; 32]>::from(Sha256::digest(&data)));
            }
            let (got, sha) = through(&[], 10, ahead);
            assert!(got.is_empty());
            assert_eq!(sha, <[u8; 32]>::from(Sha256::digest([])));
        }
    }

    #[test]
    fn a_read_error_is_handed_on_after_the_bytes_before_it() {
        struct Broken(usize);
        impl Read for Broken {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0 == 0 {
                    return Err(io::Error::from_raw_os_error(5));
                }
                let n = self.0.min(buf.len());
                buf[..n].fill(1);
                self.0 -= n;
                Ok(n)
            }
        }
        std::thread::scope(|s| {
            let mut feed = Feed::start(s, Broken(100_000)).unwrap();
            let mut seen = 0;
            let err = loop {
                match feed.next() {
                    Ok(Next::Data(_, n)) => seen += n,
                    Ok(Next::End(_)) => panic!("a digest for input that failed"),
                    Err(e) => break e,
                }
            };
            assert_eq!(seen, 100_000);
            assert_eq!(err.raw_os_error(), Some(5));
        });
    }

    #[test]
    fn a_pass_that_stops_early_ends_the_reader() {
        // Endless input: the scope returns only if dropping the feed ends the reader.
        struct Endless;
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                buf.fill(0);
                Ok(buf.len())
            }
        }
        std::thread::scope(|s| {
            let mut feed = Feed::start(s, Endless).unwrap();
            assert!(matches!(feed.next().unwrap(), Next::Data(..)));
        });
    }
}
