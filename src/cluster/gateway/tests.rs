//! Answers recorded from etcd 3.4.23 and 3.5.16 on loopback (`curl -0 -X POST`), and the
//! bounds of an exchange against local sockets.
use super::*;
use std::net::TcpListener;

/// Recorded from etcd 3.4.23 and 3.5.16 on loopback (a voter: no `isLearner`).
const VOTER_34: &str = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"header\":{\"cluster_id\":\"14299088550553659169\",\"member_id\":\"6883581636028848829\",\"revision\":\"1\",\"raft_term\":\"2\"},\"version\":\"3.4.23\",\"dbSize\":\"20480\",\"leader\":\"6883581636028848829\",\"raftIndex\":\"4\",\"raftTerm\":\"2\",\"raftAppliedIndex\":\"4\",\"dbSizeInUse\":\"16384\"}";
const VOTER_35: &str = "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: 266\r\n\r\n{\"header\":{\"cluster_id\":\"17337617138615489283\", \"member_id\":\"7367137136018225357\", \"revision\":\"1\", \"raft_term\":\"2\"}, \"version\":\"3.5.16\", \"dbSize\":\"20480\", \"leader\":\"7367137136018225357\", \"raftIndex\":\"4\", \"raftTerm\":\"2\", \"raftAppliedIndex\":\"4\", \"dbSizeInUse\":\"16384\"}";
/// A put refused under NOSPACE: HTTP 429 and etcd's line, 3.4 with `error` and
/// `message`, 3.5 with `message` only.
const NOSPACE_34: &str = "HTTP/1.0 429 Too Many Requests\r\nContent-Type: application/json\r\nTrailer: Grpc-Trailer-Content-Type\r\n\r\n{\"error\":\"etcdserver: mvcc: database space exceeded\",\"message\":\"etcdserver: mvcc: database space exceeded\",\"code\":8}";
const NOSPACE_35: &str = "HTTP/1.0 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: 65\r\n\r\n{\"code\":8, \"message\":\"etcdserver: mvcc: database space exceeded\"}";

#[test]
fn a_status_without_is_learner_is_a_voter_s() {
    assert_eq!(parse(VOTER_34.as_bytes()), Ok(false));
    assert_eq!(parse(VOTER_35.as_bytes()), Ok(false));
    let learner = VOTER_35.replace("\"dbSizeInUse\"", "\"isLearner\":true, \"dbSizeInUse\"");
    assert_eq!(parse(learner.as_bytes()), Ok(true));
}

#[test]
fn what_is_not_a_status_is_an_error_naming_why() {
    let e = parse(b"HTTP/1.1 404 Not Found\r\n\r\n404 page not found\n").unwrap_err();
    assert!(e.contains("404"), "{e}");
    let e = parse(b"HTTP/1.0 200 OK\r\n\r\n{\"isLearner\":true}").unwrap_err();
    assert!(e.contains("not a maintenance status"), "{e}");
    assert!(parse(b"garbage").is_err());
}

#[test]
fn etcds_error_line_is_read_from_3_4_and_3_5_and_classified_as_etcdctls() {
    for text in [NOSPACE_34, NOSPACE_35] {
        let reply = parse_reply(text.as_bytes()).unwrap();
        assert_eq!(reply.code, 429);
        let line = error_message(&reply.body).unwrap();
        assert_eq!(line, "etcdserver: mvcc: database space exceeded");
        assert_eq!(classify(&line), ErrorKind::NoSpace);
    }
    assert_eq!(error_message(b"404 page not found"), None);
}

#[test]
fn only_plain_http_urls_with_an_ip_go_to_the_gateway() {
    let urls = |u: &[&str]| u.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        plain(&urls(&["http://127.0.0.1:2379", "http://[::1]:2379/"])),
        Some(vec![
            "127.0.0.1:2379".parse().unwrap(),
            "[::1]:2379".parse().unwrap()
        ])
    );
    // One https endpoint, a host name, a path or no port: etcdctl for all of them.
    assert_eq!(
        plain(&urls(&["http://127.0.0.1:2379", "https://10.0.0.2:2379"])),
        None
    );
    assert_eq!(plain(&urls(&["http://etcd-1:2379"])), None);
    assert_eq!(plain(&urls(&["http://10.0.0.1:2379/v3"])), None);
    assert_eq!(plain(&urls(&["http://10.0.0.1"])), None);
}

fn one_call(addr: SocketAddr, command: Duration) -> Result<Vec<u8>, EtcdError> {
    let url = format!("http://{addr}");
    call(
        (&url, addr),
        ("/v3/maintenance/status", "{}"),
        (Duration::from_secs(2), command),
        "endpoint status",
        std::slice::from_ref(&url),
    )
}

#[test]
fn a_refused_connection_is_unreachable_and_names_the_url() {
    // A port nobody listens on (bound, then released).
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let e = one_call(addr, Duration::from_secs(2)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unreachable, "{e}");
    assert!(e.to_string().contains(&format!("http://{addr}")), "{e}");
}

#[test]
fn a_member_that_takes_the_connection_but_does_not_answer_is_out_of_time() {
    // The kernel accepts for the listener; nobody reads or answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap();
    let e = one_call(addr, Duration::from_millis(300)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(e.line.contains("no answer within 0.3 s"), "{e}");
}

#[test]
fn an_error_answer_keeps_etcds_line_and_its_kind() {
    let server = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = server.local_addr().unwrap();
    let answer = std::thread::spawn(move || {
        let (mut s, _) = server.accept().unwrap();
        let mut request = [0u8; 4096];
        let _ = s.read(&mut request).unwrap();
        s.write_all(NOSPACE_35.as_bytes()).unwrap();
    });
    let e = one_call(addr, Duration::from_secs(5)).unwrap_err();
    answer.join().unwrap();
    assert_eq!(e.kind, ErrorKind::NoSpace, "{e}");
    assert_eq!(
        e.to_string(),
        format!("etcd endpoint status on http://{addr}: etcdserver: mvcc: database space exceeded")
    );
}
