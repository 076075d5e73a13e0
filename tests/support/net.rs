//! A private layer-2 network among the test's own VMs, in user space: each VM's second
//! NIC is a qemu `dgram` netdev on a unix datagram socket, and [`Hub`] repeats every
//! Ethernet frame it receives to every other VM's socket. Nothing is routed, bridged or
//! put on a host interface: the frames exist only between these sockets, so the VMs
//! reach each other and no other address (and no root or network namespace is needed).
#![allow(dead_code)]

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A repeating hub for `ports` VMs.
pub struct Hub {
    dir: PathBuf,
    ports: usize,
    stop: Arc<AtomicBool>,
    frames: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Hub {
    /// Starts a hub whose sockets live in `dir` (short paths: unix sockets take 107 bytes).
    pub fn start(dir: &Path, ports: usize) -> Hub {
        std::fs::create_dir_all(dir).expect("hub dir");
        let hub_path = dir.join("hub.sock");
        let _ = std::fs::remove_file(&hub_path);
        for i in 0..ports {
            let _ = std::fs::remove_file(port_path(dir, i));
        }
        let socket = UnixDatagram::bind(&hub_path)
            .unwrap_or_else(|e| panic!("bind {}: {e}", hub_path.display()));
        // Wakes up now and then to notice `stop`.
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("hub timeout");
        let stop = Arc::new(AtomicBool::new(false));
        let frames = Arc::new(AtomicU64::new(0));
        let peers: Vec<PathBuf> = (0..ports).map(|i| port_path(dir, i)).collect();
        let thread = {
            let stop = stop.clone();
            let frames = frames.clone();
            std::thread::spawn(move || repeat(&socket, &peers, &stop, &frames))
        };
        Hub {
            dir: dir.to_path_buf(),
            ports,
            stop,
            frames,
            thread: Some(thread),
        }
    }

    /// qemu arguments giving a VM a virtio NIC on port `i` with MAC `mac`.
    pub fn nic_args(&self, i: usize, mac: &str) -> Vec<String> {
        assert!(i < self.ports, "the hub has {} ports", self.ports);
        vec![
            "-netdev".into(),
            format!(
                "dgram,id=lan,local.type=unix,local.path={},remote.type=unix,remote.path={}",
                port_path(&self.dir, i).display(),
                self.dir.join("hub.sock").display()
            ),
            "-device".into(),
            format!("virtio-net-pci,netdev=lan,mac={mac}"),
        ]
    }

    /// Removes port `i`'s socket, left by a VM that is gone, so a new VM can take the port.
    pub fn free_port(&self, i: usize) {
        let _ = std::fs::remove_file(port_path(&self.dir, i));
    }

    /// Frames repeated so far.
    pub fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }
}

fn port_path(dir: &Path, i: usize) -> PathBuf {
    dir.join(format!("port{i}.sock"))
}

fn repeat(socket: &UnixDatagram, peers: &[PathBuf], stop: &AtomicBool, frames: &AtomicU64) {
    let mut buf = vec![0u8; 65536];
    while !stop.load(Ordering::Relaxed) {
        let (n, from) = match socket.recv_from(&mut buf) {
            Ok(got) => got,
            Err(_) => continue, // timeout (checks `stop`), or a peer not there yet
        };
        let from = from.as_pathname().map(Path::to_path_buf);
        frames.fetch_add(1, Ordering::Relaxed);
        for peer in peers {
            if Some(peer) != from.as_ref() {
                // A VM not started yet (or gone) has no socket: its frames are lost,
                // as on a cable that is not plugged in.
                let _ = socket.send_to(&buf[..n], peer);
            }
        }
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
