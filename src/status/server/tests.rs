use super::*;
use nix::unistd::Group;

#[test]
fn parses_requests_and_refuses_other_versions_and_garbage() {
    let r = parse_request(br#"{"version":1,"wait":true,"timeout_ms":5}"#).unwrap();
    assert!(r.wait && r.timeout_ms == 5);
    let r = parse_request(br#"{"version":1}"#).unwrap();
    assert!(!r.wait);
    assert_eq!(
        parse_request(br#"{"version":2}"#).unwrap_err().code,
        "unsupported-version"
    );
    assert_eq!(parse_request(b"hello").unwrap_err().code, "bad-request");
}

#[test]
fn root_is_always_allowed_and_an_unknown_group_admits_no_one_else() {
    let access = Access::new("no-such-group-etcd-setup");
    assert!(access.allows(Uid::from_raw(0), Gid::from_raw(0)));
    assert!(!access.allows(Uid::from_raw(65534), Gid::from_raw(65534)));
    let refusal = access.refusal(Uid::from_raw(65534));
    assert_eq!(refusal.code, "forbidden");
    assert!(refusal
        .message
        .contains("only root and members of group no-such-group-etcd-setup"));
}

#[test]
fn the_watch_counts_a_change_made_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let watch = Watch::new(dir.path()).unwrap();
    let (before, reliable) = watch.current();
    assert!(reliable);
    assert_eq!(watch.current().0, before, "nothing changed");
    // inotify queues the event within the rename: the very next read sees it.
    let tmp = dir.path().join("state.json.tmp");
    std::fs::write(&tmp, b"{}").unwrap();
    std::fs::rename(&tmp, dir.path().join("state.json")).unwrap();
    assert_ne!(watch.current().0, before);
    // A removed folder ends the watch: nothing it says can be trusted any more.
    std::fs::remove_file(dir.path().join("state.json")).unwrap();
    std::fs::remove_dir(dir.path()).unwrap();
    assert!(!watch.current().1);
    assert!(!Watch::absent().current().1);
}

#[test]
fn requests_are_read_up_to_their_newline_and_at_most_4_kib() {
    let mut scratch = vec![0; MAX_REQUEST + 1];
    let (mut a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let mut buf = Vec::new();
    assert!(
        read_some(&mut a, &mut buf, &mut scratch).is_none(),
        "nothing yet"
    );
    b.write_all(b"{\"version\":").unwrap();
    assert!(
        read_some(&mut a, &mut buf, &mut scratch).is_none(),
        "half a line"
    );
    b.write_all(b"1}\ntrailing").unwrap();
    let line = read_some(&mut a, &mut buf, &mut scratch).unwrap().unwrap();
    assert_eq!(line, b"{\"version\":1}");
    let (mut a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.write_all(&[b' '; 5000]).unwrap();
    let mut buf = Vec::new();
    let e = read_some(&mut a, &mut buf, &mut scratch)
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, "request-too-large");
    let (mut a, b) = UnixStream::pair().unwrap();
    drop(b);
    let e = read_some(&mut a, &mut Vec::new(), &mut scratch)
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, "bad-request", "closed before a request");
}

/// No etcd to look at (a state that never asks for it answers the same).
struct NoEtcd;

impl LiveView for NoEtcd {
    fn etcd(&self) -> Result<super::super::EtcdLive, String> {
        Err("no etcd in this test".into())
    }
}

/// A server on a socket in `dir` with no state (answers `not-started`), in a thread.
/// `before` runs between binding and serving.
fn serve_in(dir: &Path, before: impl FnOnce(&Path)) {
    let socket = dir.join("status.sock");
    let listener = bind(&socket).unwrap();
    before(&socket);
    let options = Options {
        store: StateStore::new(dir.join("run"), dir.join("lib")),
        // The group of whoever runs the tests: its peers are allowed.
        group: Group::from_gid(nix::unistd::getegid())
            .ok()
            .flatten()
            .map_or_else(|| "root".into(), |g| g.name),
        idle_exit: None,
        tls: None,
        backup_period: None,
    };
    let live = Arc::new(NoEtcd);
    std::thread::spawn(move || serve(listener, options, live));
}

fn read_line(s: &mut UnixStream) -> String {
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply
}

#[test]
fn a_burst_larger_than_the_slots_is_answered_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut clients = Vec::new();
    // 600 requests queued in the listen backlog before the server even starts.
    serve_in(dir.path(), |socket| {
        for _ in 0..600 {
            let mut s = UnixStream::connect(socket).unwrap();
            s.write_all(b"{\"version\":1}\n").unwrap();
            clients.push(s);
        }
    });
    for s in &mut clients {
        let reply = read_line(s);
        assert!(reply.contains("\"verdict\":\"not-started\""), "{reply}");
    }
}

#[test]
fn past_the_held_slots_a_client_is_told_busy_until_one_frees() {
    let dir = tempfile::tempdir().unwrap();
    serve_in(dir.path(), |_| {});
    let socket = dir.path().join("status.sock");
    let silent: Vec<UnixStream> = (0..MAX_CLIENTS)
        .map(|_| UnixStream::connect(&socket).unwrap())
        .collect();
    // Wait until the server holds them all, then one more is refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    let reply = loop {
        let mut s = UnixStream::connect(&socket).unwrap();
        s.write_all(b"{\"version\":1}\n").unwrap();
        let reply = read_line(&mut s);
        if reply.contains("\"busy\"") || Instant::now() > deadline {
            break reply;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(reply.contains("\"code\":\"busy\""), "{reply}");
    drop(silent);
    // The slots free as the silent clients hang up (each read sees end of file).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut s = UnixStream::connect(&socket).unwrap();
        s.write_all(b"{\"version\":1}\n").unwrap();
        let reply = read_line(&mut s);
        if reply.contains("not-started") {
            break;
        }
        assert!(Instant::now() < deadline, "still refused: {reply}");
        std::thread::sleep(Duration::from_millis(10));
    }
}
