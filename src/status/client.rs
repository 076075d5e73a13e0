//! The client: `etcd-setup status` sends one request and prints the answer.

use super::protocol::{Answer, ErrorBody, Reply, Request};
use super::text::{text_line, text_long};
use super::{MAX_WAIT, PROTOCOL_VERSION, REQUEST_TIMEOUT};
use crate::cli::{Format, StatusArgs};
use crate::exit;
use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// The largest reply the client reads.
const MAX_REPLY: u64 = 1 << 20;

/// `etcd-setup status`: one request to the socket, the answer printed, its exit code.
pub fn command(args: &StatusArgs) -> u8 {
    let request = Request {
        version: PROTOCOL_VERSION,
        wait: args.wait,
        timeout_ms: u64::try_from(args.timeout.as_millis()).unwrap_or(u64::MAX),
    };
    match query(&args.socket, &request, std::time::Duration::from_secs(10)) {
        Ok(answer) => {
            match (args.format, args.long) {
                (Format::Json, _) => match serde_json::to_string_pretty(&answer) {
                    Ok(json) => println!("{json}"),
                    Err(e) => {
                        eprintln!("etcd-setup status: cannot encode the answer: {e}");
                        return exit::status::UNREACHABLE;
                    }
                },
                (Format::Text, true) => print!("{}", text_long(&answer)),
                (Format::Text, false) => println!("{}", text_line(&answer)),
            }
            answer.exit_code
        }
        Err(e) => {
            match &e {
                ClientError::Refused(body) if args.format == Format::Json => {
                    println!("{}", serde_json::json!({ "error": body }));
                }
                _ => {}
            }
            let what = match e {
                ClientError::Refused(_) => "refused",
                ClientError::Unreachable(_) => "unreachable",
            };
            eprintln!("etcd-setup status: {what}: {e}");
            exit::status::UNREACHABLE
        }
    }
}

/// What the client could not do.
#[derive(Debug)]
pub enum ClientError {
    /// Connecting, writing or reading failed, or the reply is malformed.
    Unreachable(String),
    /// The server answered with an error.
    Refused(ErrorBody),
}

impl std::fmt::Display for ClientError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientError::Unreachable(why) => f.write_str(why),
            ClientError::Refused(e) => write!(f, "{}: {}", e.code, e.message),
        }
    }
}

/// Sends `request` to the server at `socket` and reads its answer. The reply may take
/// up to the request's wait plus `slack`.
pub fn query(socket: &Path, request: &Request, slack: Duration) -> Result<Answer, ClientError> {
    let shown = socket.display();
    let unreachable = |what: &str, e: &dyn std::fmt::Display| {
        ClientError::Unreachable(format!("cannot {what} the status socket {shown}: {e}"))
    };
    let mut stream = UnixStream::connect(socket).map_err(|e| unreachable("connect to", &e))?;
    let wait = if request.wait {
        Duration::from_millis(request.timeout_ms).min(MAX_WAIT)
    } else {
        Duration::ZERO
    };
    let _ = stream.set_write_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_read_timeout(Some(wait + slack));
    let mut line = serde_json::to_vec(request).map_err(|e| unreachable("encode for", &e))?;
    line.push(b'\n');
    stream
        .write_all(&line)
        .map_err(|e| unreachable("write to", &e))?;
    let reply = read_reply(&mut stream).map_err(|e| unreachable("read from", &e))?;
    match Reply::parse(&reply) {
        Ok(Reply::Answer(a)) => Ok(*a),
        Ok(Reply::Error(e)) => Err(ClientError::Refused(e)),
        Err(why) => Err(ClientError::Unreachable(format!("{shown}: {why}"))),
    }
}

/// Reads one reply line. A reset after the line counts as its end: the server closes
/// without reading what a client sent beyond its request.
fn read_reply(stream: &mut UnixStream) -> io::Result<Vec<u8>> {
    let mut reply = Vec::new();
    let mut limited = stream.take(MAX_REPLY);
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
