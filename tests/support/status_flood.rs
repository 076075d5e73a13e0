//! The flood of `tests/status.rs`'s test of a hostile local user (issue 15 item 1), run
//! as uid 65534 through `setpriv`: keeps FLOOD_CONNS silent connections to FLOOD_SOCKET
//! open, opening a new one as soon as the server answers or closes one, until its stdin
//! closes. Prints `ready` once the first ones are open. Built only with the
//! `test-fixtures` feature; never shipped.

use std::io::Write;
use std::os::unix::net::UnixStream;

fn main() {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let socket = std::env::var_os("FLOOD_SOCKET").expect("FLOOD_SOCKET");
    let n: usize = std::env::var("FLOOD_CONNS").unwrap().parse().unwrap();
    let connect = || loop {
        match UnixStream::connect(&socket) {
            Ok(s) => return s,
            Err(_) => std::thread::yield_now(), // backlog full: try again
        }
    };
    let mut conns: Vec<UnixStream> = (0..n).map(|_| connect()).collect();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let stdin = std::io::stdin();
    let mut reconnects: u64 = 0;
    loop {
        let mut fds = vec![PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        fds.extend(
            conns
                .iter()
                .map(|c| PollFd::new(c.as_fd(), PollFlags::POLLIN)),
        );
        poll(&mut fds, PollTimeout::from(1000u16)).unwrap();
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            break; // the test is done
        }
        let ready: Vec<usize> = (1..fds.len())
            .filter(|&i| fds[i].revents().is_some_and(|r| !r.is_empty()))
            .map(|i| i - 1)
            .collect();
        drop(fds);
        for i in ready {
            conns[i] = connect();
            reconnects += 1;
        }
    }
    eprintln!("flood: {reconnects} reconnections");
}
