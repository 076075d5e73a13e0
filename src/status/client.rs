//! The client: `etcd-setup status` sends one request and prints the answer.
//!
//! With `--format json`, every outcome is one JSON object of schema 1 on stdout: the
//! server's answer, or, when there is none (the socket cannot be reached, the server
//! refused the request, gave no answer in time or an unreadable one), an object with
//! `verdict: "unreachable"`, `exit_code: 5` and `error: {code, message}` ([`Unanswered`]).
//! Text and JSON go out through [`crate::shared::output::print`]: a closed stdout ends the output
//! quietly.

use super::protocol::{Answer, ErrorBody, Reply, Request};
use super::text::{text_line, text_long};
use super::{MAX_WAIT, PROTOCOL_VERSION, REQUEST_TIMEOUT, SCHEMA_VERSION};
use crate::cli::{StatusArgs, StatusFormat as Format};
use crate::{exit, shared::output, shared::printable};
use serde::Serialize;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// How long the client waits for a reply beyond the request's own `--wait`.
const SLACK: Duration = Duration::from_secs(20);

/// `etcd-setup status`: one request to the socket, the answer printed, its exit code.
pub fn command(args: &StatusArgs) -> u8 {
    let request = Request {
        version: PROTOCOL_VERSION,
        wait: args.wait,
        timeout_ms: u64::try_from(args.timeout.as_millis()).unwrap_or(u64::MAX),
    };
    match query(&args.socket, &request, SLACK) {
        Ok(answer) => {
            let text = match (args.format, args.long) {
                (Format::Json, _) => match serde_json::to_string_pretty(&answer) {
                    Ok(json) => format!("{json}\n"),
                    Err(e) => {
                        eprintln!("etcd-setup status: cannot encode the answer: {e}");
                        return exit::status::UNREACHABLE;
                    }
                },
                (Format::Prometheus, _) => {
                    super::prometheus::exposition(&answer, std::time::SystemTime::now())
                }
                (Format::Text, true) => text_long(&answer),
                (Format::Text, false) => format!("{}\n", text_line(&answer)),
            };
            if !emit(args, &text) {
                return exit::status::UNREACHABLE;
            }
            answer.exit_code
        }
        Err(e) => {
            match args.format {
                Format::Json => {
                    let body = Unanswered::new(&args.socket, &e);
                    if let Ok(json) = serde_json::to_string_pretty(&body) {
                        emit(args, &format!("{json}\n"));
                    }
                }
                Format::Prometheus => {
                    emit(args, &super::prometheus::unreachable());
                }
                Format::Text => {}
            }
            let what = match e {
                ClientError::Refused(_) => "refused",
                _ => "unreachable",
            };
            eprintln!(
                "etcd-setup status: {what}: {}",
                printable::line(&e.to_string())
            );
            exit::status::UNREACHABLE
        }
    }
}

/// Prints `text`, or writes it atomically to `--output`; false (said on stderr, naming
/// the file) when the file could not be written.
fn emit(args: &StatusArgs, text: &str) -> bool {
    let Some(file) = &args.output else {
        output::print(text);
        return true;
    };
    match crate::shared::report::atomic_write(file, text.as_bytes(), 0o644, None) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("etcd-setup status: cannot write {}: {e}", file.display());
            false
        }
    }
}

/// What `status --format json` prints when no answer came (schema 1): `verdict` is
/// `unreachable`, `exit_code` 5, and `error` says what happened.
#[derive(Debug, Serialize)]
pub struct Unanswered {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Always `unreachable`.
    pub verdict: &'static str,
    /// [`exit::status::UNREACHABLE`].
    pub exit_code: u8,
    /// The server's refusal (`forbidden`, `busy`, …) or the client's own code:
    /// `unreachable` (no connection), `timeout` (no answer in time) or `bad-reply`.
    pub error: ErrorBody,
    /// The socket asked.
    pub socket: String,
}

impl Unanswered {
    /// The object for `error` on `socket`.
    pub fn new(socket: &Path, error: &ClientError) -> Unanswered {
        Unanswered {
            schema_version: SCHEMA_VERSION,
            verdict: "unreachable",
            exit_code: exit::status::UNREACHABLE,
            error: match error {
                ClientError::Refused(body) => body.clone(),
                other => ErrorBody::new(other.code(), other.to_string()),
            },
            socket: socket.display().to_string(),
        }
    }
}

/// What the client could not do.
#[derive(Debug)]
pub enum ClientError {
    /// Connecting, writing or reading failed.
    Unreachable(String),
    /// No reply within the time allowed.
    Timeout(String),
    /// The reply is not one the protocol knows.
    BadReply(String),
    /// The server answered with an error.
    Refused(ErrorBody),
}

impl ClientError {
    /// The error's code in [`Unanswered`]: the server's, or the client's own.
    pub fn code(&self) -> &str {
        match self {
            ClientError::Unreachable(_) => "unreachable",
            ClientError::Timeout(_) => "timeout",
            ClientError::BadReply(_) => "bad-reply",
            ClientError::Refused(e) => &e.code,
        }
    }
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(why)
            | ClientError::Timeout(why)
            | ClientError::BadReply(why) => f.write_str(why),
            ClientError::Refused(e) => write!(f, "{}: {}", e.code, e.message),
        }
    }
}

/// Sends `request` to the server at `socket` and reads its answer. The reply may take
/// up to the request's wait plus `slack`.
pub fn query(socket: &Path, request: &Request, slack: Duration) -> Result<Answer, ClientError> {
    let mut stream = UnixStream::connect(socket).map_err(|e| {
        ClientError::Unreachable(format!(
            "cannot connect to the status socket {}: {e}",
            socket.display()
        ))
    })?;
    let wait = if request.wait {
        Duration::from_millis(request.timeout_ms).min(MAX_WAIT)
    } else {
        Duration::ZERO
    };
    exchange(&mut stream, socket, request, wait + slack)
}

/// Writes `request` on `stream` (connected to `socket`) and reads the reply, waiting at
/// most `patience` for it.
fn exchange(
    stream: &mut UnixStream,
    socket: &Path,
    request: &Request,
    patience: Duration,
) -> Result<Answer, ClientError> {
    let shown = socket.display();
    let unreachable = |what: &str, e: &dyn std::fmt::Display| {
        ClientError::Unreachable(format!("cannot {what} the status socket {shown}: {e}"))
    };
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_read_timeout(Some(patience));
    let mut line = serde_json::to_vec(request).map_err(|e| unreachable("encode for", &e))?;
    line.push(b'\n');
    // A server that refuses at once (`busy`, `forbidden`) writes its reply and closes
    // without reading: the write may then fail (EPIPE) while the reply waits to be read.
    let written = stream.write_all(&line);
    let reply = match read_reply(stream) {
        Ok(reply) => reply,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            return Err(ClientError::Timeout(format!(
                "no answer within {} s from {shown}",
                patience.as_secs()
            )))
        }
        Err(e) => {
            return Err(match written {
                Err(w) => unreachable("write to", &w),
                Ok(()) => unreachable("read from", &e),
            })
        }
    };
    match Reply::parse(&reply) {
        Ok(Reply::Answer(a)) => Ok(*a),
        Ok(Reply::Error(e)) => Err(ClientError::Refused(e)),
        Err(why) => Err(ClientError::BadReply(format!("{shown}: {why}"))),
    }
}

/// Reads one reply line. A reset after the line counts as its end: the server closes
/// without reading what a client sent beyond its request.
fn read_reply(stream: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut reply = Vec::new();
    let mut limited = stream.take(super::protocol::MAX_REPLY);
    let mut buf = [0u8; 8192];
    loop {
        match limited.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                reply.extend_from_slice(&buf[..n]);
                if reply.ends_with(b"\n") {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset && !reply.is_empty() => break,
            Err(e) => return Err(e),
        }
    }
    if reply.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the server closed the connection without a reply",
        ));
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Shutdown;

    /// The server told the client `busy` and stopped reading before the request was
    /// written, so writing it fails with EPIPE: the client shows the server's reply, not
    /// "Broken pipe" (issue 15 item 1).
    #[test]
    fn a_refusal_sent_before_the_request_is_shown_not_the_broken_pipe() {
        let (mut client, server) = UnixStream::pair().unwrap();
        let busy = Reply::Error(ErrorBody::new("busy", "256 queries are being answered"));
        (&server).write_all(&busy.to_line()).unwrap();
        server.shutdown(Shutdown::Read).unwrap();
        let request = Request {
            version: PROTOCOL_VERSION,
            wait: false,
            timeout_ms: 0,
        };
        // The write does fail here, as it does against a server that closed.
        assert_eq!(
            (&client).write_all(b"x").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
        match exchange(&mut client, Path::new("s.sock"), &request, SLACK) {
            Err(ClientError::Refused(e)) => assert_eq!(e.code, "busy"),
            other => panic!("{other:?}"),
        }
    }
}
