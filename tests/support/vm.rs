//! The VM test bed: boots the etcd node image under qemu the way the cloud platform
//! does (direct kernel boot, virtio disk, IDE CD-ROMs, a NoCloud seed), and lets tests
//! drive it over SSH and QMP.
//!
//! - Each VM gets its own copy-on-write overlay, work folder, SSH port and QMP socket.
//! - KVM is used when a quick probe shows it really runs a guest, TCG otherwise.
//! - User-mode networking with `restrict=on`: the guest reaches nothing but what is
//!   forwarded to it; SSH is forwarded from a loopback port only.
//! - Every wait is bounded. The VM is killed by its own PID when the `Vm` drops, also
//!   when a test panics; the serial console is kept under `target/vm-logs/` and its tail
//!   is printed when the test failed.
#![allow(dead_code)] // each test binary uses its own part of the bed

use serde_json::{json, Value};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where VM work folders and kept console logs go.
fn logs_root() -> PathBuf {
    let dir = repo().join("target/vm-logs");
    fs::create_dir_all(&dir).expect("create target/vm-logs");
    dir
}

/// Prints a measured figure and appends it to `$ETCD_SETUP_REPORT` for the CI summary.
pub fn report(line: &str) {
    println!("[vm] {line}");
    if let Ok(path) = std::env::var("ETCD_SETUP_REPORT") {
        if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Adds one boot (qemu started → SSH login) to `$ETCD_SETUP_BOOT_LOG`, a line
/// `NAME SECONDS`, from which tests/run sums each scenario's boot time.
fn boot_logged(name: &str, took: Duration) {
    if let Ok(path) = std::env::var("ETCD_SETUP_BOOT_LOG") {
        if let Ok(mut f) = fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{name} {:.1}", took.as_secs_f64());
        }
    }
}

/// The node image built by `vm-images/build`.
pub struct Image {
    /// Folder holding node.qcow2, vmlinuz, initrd.img.
    pub dir: PathBuf,
}

impl Image {
    /// The image named by `ETCD_SETUP_VM_IMAGE` (set by `tests/run`).
    pub fn from_env() -> Image {
        let dir = std::env::var_os("ETCD_SETUP_VM_IMAGE")
            .map(PathBuf::from)
            .expect(
                "ETCD_SETUP_VM_IMAGE is not set: run the VM tests through tests/run, \
             or set it to the folder vm-images/build prints",
            );
        Image::at(dir)
    }

    /// The image in `dir` (a folder vm-images/build printed), checked to hold its files.
    pub fn at(dir: PathBuf) -> Image {
        for f in ["node.qcow2", "vmlinuz", "initrd.img"] {
            assert!(
                dir.join(f).is_file(),
                "{} has no {f}: rebuild with vm-images/build",
                dir.display()
            );
        }
        Image { dir }
    }

    /// A value from the image's build-info file (written by vm-images/build).
    pub fn build_info(&self, key: &str) -> String {
        let path = self.dir.join("build-info");
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{} has no {key}", path.display()))
            .to_string()
    }
}

/// How qemu runs the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    /// Hardware virtualisation, where it really runs a guest.
    Kvm,
    /// Software emulation.
    Tcg,
}

impl Accel {
    fn args(self) -> Vec<&'static str> {
        match self {
            Accel::Kvm => vec!["-accel", "kvm", "-cpu", "host"],
            // No SVM or VMX for the guest: seeing them, udev loads kvm_amd or kvm_intel,
            // whose set-up under TCG took 16 s of a boot beside a cluster (CI-like run,
            // the bed's console: "kvm: Nested Virtualization enabled"); an etcd node
            // never hosts guests.
            Accel::Tcg => vec![
                "-accel",
                "tcg,thread=multi,tb-size=512",
                "-cpu",
                "max,svm=off,vmx=off",
            ],
        }
    }
}

/// KVM or TCG, decided once per test process by trying KVM (or forced by
/// `ETCD_SETUP_ACCEL=kvm|tcg`).
pub fn accel(image: &Image) -> Accel {
    static ACCEL: OnceLock<Accel> = OnceLock::new();
    *ACCEL.get_or_init(|| {
        let accel = match std::env::var("ETCD_SETUP_ACCEL").as_deref() {
            Ok("kvm") => Accel::Kvm,
            Ok("tcg") => Accel::Tcg,
            _ => probe_kvm(image),
        };
        report(&format!("accelerator: {accel:?}"));
        accel
    })
}

/// Boots the image's kernel under KVM with no init, so it panics at once; a KVM that
/// really runs guests gets there in about a second. Aborts and stalls mean TCG.
fn probe_kvm(image: &Image) -> Accel {
    if !Path::new("/dev/kvm").exists() {
        report("kvm probe: no /dev/kvm");
        return Accel::Tcg;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("kvm-probe.log");
    let started = Instant::now();
    let child = Command::new("qemu-system-x86_64")
        .args([
            "-machine", "pc", "-accel", "kvm", "-cpu", "host", "-m", "256",
        ])
        .args(["-nodefaults", "-display", "none", "-no-reboot"])
        .arg("-kernel")
        .arg(image.dir.join("vmlinuz"))
        .args(["-append", "console=ttyS0 panic=-1 rdinit=/nonexistent"])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            report(&format!("kvm probe: cannot start qemu-system-x86_64: {e}"));
            return Accel::Tcg;
        }
    };
    let deadline = Duration::from_secs(6);
    let exited = wait_child(&mut child, deadline);
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let console = fs::read_to_string(&log).unwrap_or_default();
    let ok = exited.is_some() && console.contains("Kernel panic");
    report(&format!(
        "kvm probe: {} after {:.1} s",
        if ok {
            "ran a guest"
        } else {
            "did not run a guest"
        },
        started.elapsed().as_secs_f64()
    ));
    if ok {
        Accel::Kvm
    } else {
        Accel::Tcg
    }
}

/// Starts qemu with `args`, its output kept in `dir`.
fn spawn_qemu(dir: &Path, args: &[std::ffi::OsString]) -> Child {
    Command::new("qemu-system-x86_64")
        .args(args)
        .stdin(Stdio::null())
        .stdout(fs::File::create(dir.join("qemu.out")).expect("qemu.out"))
        .stderr(fs::File::create(dir.join("qemu.err")).expect("qemu.err"))
        .spawn()
        .expect("start qemu-system-x86_64 (install it with vm-images/host-setup)")
}

/// `ssh` as `cloud` to the guest behind loopback `port`, bounded by `limit` (coreutils
/// `timeout` kills it), host keys not kept (each VM makes new ones). `LogLevel=ERROR`
/// and no `-q`: ssh says nothing of its own unless it fails, and then says why, which
/// [`output_connected`] reads.
pub fn ssh_command(port: u16, limit: Duration, remote: &str) -> Command {
    ssh_via(port, limit, remote, None)
}

/// [`ssh_command`], sharing one connection per `control` socket (ssh's ControlMaster),
/// as a management server polling every few seconds keeps its connections.
fn ssh_via(port: u16, limit: Duration, remote: &str, control: Option<&Path>) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["--kill-after=5", &limit.as_secs().max(1).to_string()])
        .args(["ssh", "-i"])
        .arg(&ssh_key().private)
        .args(["-p", &port.to_string()])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
        ])
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=20",
            "-o",
            "LogLevel=ERROR",
        ])
        .args(["-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]);
    if let Some(control) = control {
        cmd.args(["-o", "ControlMaster=auto", "-o", "ControlPersist=60"])
            .arg("-o")
            .arg(format!("ControlPath={}", control.display()));
    }
    cmd.arg("cloud@127.0.0.1").arg(remote).stdin(Stdio::null());
    cmd
}

/// A way into one guest that threads can share: SSH over a kept connection.
#[derive(Clone, Debug)]
pub struct Remote {
    /// The VM's name.
    pub name: String,
    port: u16,
    control: PathBuf,
}

impl Remote {
    /// Runs `remote` as `cloud`, at most `limit`.
    pub fn run(&self, limit: Duration, remote: &str) -> Output {
        output_connected(&self.name, || {
            ssh_via(self.port, limit, remote, Some(&self.control))
        })
    }
}

/// Whether ssh's `out` is a connection that never reached the point of running the
/// command: exit 255, nothing on stdout, and ssh's own words for a failed connect, banner
/// exchange or key exchange. Then the command did not run and may be tried again.
fn never_connected(out: &Output) -> bool {
    const BEFORE_THE_COMMAND: [&str; 6] = [
        "banner exchange",
        "kex_exchange_identification",
        "Connection refused",
        "Connection reset by",
        "Connection closed by",
        "Connection timed out",
    ];
    let said = String::from_utf8_lossy(&out.stderr);
    out.status.code() == Some(255)
        && out.stdout.is_empty()
        && BEFORE_THE_COMMAND.iter().any(|w| said.contains(w))
}

/// Runs the ssh that `command` makes, again (up to three times in all) while it never
/// connected (see [`never_connected`]): with four to six TCG guests on two cores, sshd in a
/// guest once took longer than the connect timeout to send its banner (CI at 9b4654b: a
/// `kill -SEGV` in c1 and an `etcdctl get` in c4 came back as exit 255 with nothing said).
/// A command that ran is never run twice.
fn output_connected(name: &str, command: impl Fn() -> Command) -> Output {
    let mut tries = 0;
    loop {
        let out = command().output().expect("run ssh");
        tries += 1;
        if tries == 3 || !never_connected(&out) {
            return out;
        }
        eprintln!(
            "[vm] {name}: ssh did not connect ({}); trying again",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// Runs `remote` in the guest on a thread of its own (at most 300 s), for watching the
/// guest while the test acts on it; the handle yields stdout, whatever the exit status.
pub fn spawn_in_guest(vm: &Vm, remote: &str) -> std::thread::JoinHandle<String> {
    let mut cmd = ssh_command(vm.ssh_port, Duration::from_secs(300), remote);
    std::thread::spawn(move || {
        let out = cmd.output().expect("run ssh");
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
}

/// Seconds since the epoch on the host.
pub fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Waits for a child to exit, at most `limit`; polls every 50 ms (std has no timed wait).
fn wait_child(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The SSH key pair of this test process, generated once per run.
pub struct SshKey {
    /// Private key file.
    pub private: PathBuf,
    /// Public key line.
    pub public: String,
}

/// This process's SSH key (made with ssh-keygen on first use).
pub fn ssh_key() -> &'static SshKey {
    static KEY: OnceLock<SshKey> = OnceLock::new();
    KEY.get_or_init(|| {
        let dir = logs_root().join(format!("key-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("key dir");
        let private = dir.join("id_ed25519");
        let _ = fs::remove_file(&private);
        let out = Command::new("ssh-keygen")
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "etcd-setup-tests",
                "-f",
            ])
            .arg(&private)
            .output()
            .expect("run ssh-keygen");
        assert!(
            out.status.success(),
            "ssh-keygen: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let public = fs::read_to_string(dir.join("id_ed25519.pub")).expect("public key");
        SshKey {
            private,
            public: public.trim().to_string(),
        }
    })
}

/// Builds a NoCloud seed ISO (label CIDATA) the way the management server's config
/// drive carries it: creates the `cloud` user with this run's SSH key, plus `extra`
/// cloud-config (YAML lines appended to user-data), and a `network-config` (cloud-init's
/// network config version 2) when given. With `as_is`, `extra` is the whole user-data,
/// exactly as the platform rendered it (it must create `cloud` with this run's key).
pub fn seed_iso(
    dir: &Path,
    hostname: &str,
    extra: &str,
    as_is: bool,
    network: Option<&str>,
) -> PathBuf {
    let src = dir.join("seed");
    fs::create_dir_all(&src).expect("seed dir");
    fs::write(
        src.join("meta-data"),
        format!(
            "instance-id: {hostname}-{}\nlocal-hostname: {hostname}\n",
            std::process::id()
        ),
    )
    .expect("meta-data");
    let stripped = extra.strip_prefix("#cloud-config\n").unwrap_or(extra);
    let user_data = if as_is {
        extra.to_string()
    } else {
        format!(
            "#cloud-config\n\
         users:\n\
         \x20 - name: cloud\n\
         \x20   shell: /bin/bash\n\
         \x20   sudo: ALL=(ALL) NOPASSWD:ALL\n\
         \x20   lock_passwd: true\n\
         \x20   ssh_authorized_keys:\n\
         \x20     - {}\n{stripped}",
            ssh_key().public
        )
    };
    fs::write(src.join("user-data"), user_data).expect("user-data");
    if let Some(network) = network {
        fs::write(src.join("network-config"), network).expect("network-config");
    }
    let iso = dir.join("seed.iso");
    super::inputs::make_iso(&src, "CIDATA", &iso);
    iso
}

/// What to boot.
pub struct VmSpec {
    /// Names the work folder and the guest's hostname.
    pub name: String,
    /// An ISO in the Kubernetes CD-ROM drive at boot, or an empty drive.
    pub cdrom: Option<PathBuf>,
    /// Extra cloud-config for the seed.
    pub user_data: String,
    /// `user_data` is the whole user-data (a platform template rendered), not lines
    /// added to the bed's own `cloud` user.
    pub user_data_as_is: bool,
    /// Guest memory in MiB.
    pub memory_mb: u32,
    /// Virtual CPUs.
    pub cpus: u32,
    /// cloud-init network config for the seed (the first NIC has MAC [`NAT_MAC`]).
    pub network_config: Option<String>,
    /// Extra qemu arguments (for example a second NIC).
    pub extra_args: Vec<String>,
    /// Host services the guest may reach, as (guest port, host port): the guest connects
    /// to [`HOST_SERVICES`]`:GUEST_PORT` and qemu's user-mode network carries it to
    /// 127.0.0.1:HOST_PORT. For an S3 store on the host's loopback, for example. They go
    /// on a NIC of their own ([`STORE_NIC`], address [`STORE_IP`], a second user-mode
    /// network with `restrict=on`: the guest reaches nothing else through it), so that a
    /// test can cut the store's link (`Vm::set_link`) and still reach the guest over SSH.
    /// Each guest connection runs `socat` on the host to 127.0.0.1:HOST_PORT (guestfwd's
    /// `cmd:` form; its chardev form would be one stream for every connection, opened once
    /// when qemu starts). Needs `network_config` to have an `ethernets:` map (or none):
    /// the store NIC's entry is added to it.
    pub guest_forwards: Vec<(u16, u16)>,
}

/// The address at which a guest reaches the host services of [`VmSpec::guest_forwards`].
pub const HOST_SERVICES: &str = "10.0.3.100";

/// The guest's address on the host services' network (user-mode, 10.0.3.0/24).
pub const STORE_IP: &str = "10.0.3.15";

/// The MAC of the host services' NIC.
pub const STORE_MAC: &str = "52:54:00:12:34:57";

/// The qemu device ID of the host services' NIC, for `Vm::set_link`.
pub const STORE_NIC: &str = "storenic";

/// The qemu arguments of the host services' NIC for `forwards` (none without any).
fn store_nic_args(forwards: &[(u16, u16)]) -> Vec<String> {
    if forwards.is_empty() {
        return Vec::new();
    }
    let rules: String = forwards
        .iter()
        .map(|(guest, host)| {
            // One socat a connection, its stdin and stdout the guest's connection (and so
            // its stderr: -lf sends its messages elsewhere).
            format!(
                ",guestfwd=tcp:{HOST_SERVICES}:{guest}-cmd:socat -lf /dev/null STDIO TCP:127.0.0.1:{host}"
            )
        })
        .collect();
    vec![
        "-netdev".into(),
        format!("user,id=store,net=10.0.3.0/24,restrict=on{rules}"),
        "-device".into(),
        format!("virtio-net-pci,netdev=store,mac={STORE_MAC},id={STORE_NIC}"),
    ]
}

/// `network` (cloud-init's network config version 2) with the host services' NIC: its
/// static address, no gateway (nothing but the forwarded services lies behind it).
fn with_store_nic(network: Option<&str>) -> String {
    let entry = format!(
        "ethernets:\n\
         \x20 store:\n\
         \x20   match: {{macaddress: \"{STORE_MAC}\"}}\n\
         \x20   addresses: [\"{STORE_IP}/24\"]\n"
    );
    match network {
        Some(n) => {
            assert_eq!(
                n.matches("ethernets:\n").count(),
                1,
                "guest_forwards need one `ethernets:` map in network_config: {n}"
            );
            n.replace("ethernets:\n", &entry)
        }
        None => format!(
            "version: 2\n{entry}\
             \x20 nat:\n\
             \x20   match: {{macaddress: \"{NAT_MAC}\"}}\n\
             \x20   dhcp4: true\n"
        ),
    }
}

/// The MAC of every VM's first NIC (user-mode networking, SSH).
pub const NAT_MAC: &str = "52:54:00:12:34:56";

impl VmSpec {
    /// A node with an empty CD-ROM drive and no extra cloud-config.
    pub fn new(name: &str) -> VmSpec {
        VmSpec {
            name: name.to_string(),
            cdrom: None,
            user_data: String::new(),
            user_data_as_is: false,
            memory_mb: 2048,
            cpus: 2,
            network_config: None,
            extra_args: Vec::new(),
            guest_forwards: Vec::new(),
        }
    }
}

/// A running node VM.
pub struct Vm {
    /// The VM's name.
    pub name: String,
    /// Its work folder (overlay, seed, console log, QMP socket).
    pub dir: PathBuf,
    /// The loopback port forwarded to the guest's SSH.
    pub ssh_port: u16,
    /// When qemu was started.
    pub started: Instant,
    /// How the guest runs.
    pub accel: Accel,
    child: Child,
    qmp: Option<Qmp>,
    command: Vec<std::ffi::OsString>,
    /// Whether qemu was started again after aborting on its own assertion (once per VM).
    restarted: bool,
}

/// A free TCP port on 127.0.0.1 (released before qemu binds it; a clash makes qemu fail
/// at start, which `boot` reports).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind a loopback port")
}

impl Vm {
    /// Boots a node from a fresh overlay of `image`.
    pub fn boot(image: &Image, spec: VmSpec) -> Vm {
        let accel = accel(image);
        let dir = logs_root().join(format!("{}-{}", spec.name, std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("vm dir");
        let overlay = dir.join("overlay.qcow2");
        let out = Command::new("qemu-img")
            .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
            .arg(image.dir.join("node.qcow2"))
            .arg(&overlay)
            .output()
            .expect("run qemu-img");
        assert!(
            out.status.success(),
            "qemu-img: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let network = if spec.guest_forwards.is_empty() {
            spec.network_config.clone()
        } else {
            Some(with_store_nic(spec.network_config.as_deref()))
        };
        let seed = seed_iso(
            &dir,
            &spec.name,
            &spec.user_data,
            spec.user_data_as_is,
            network.as_deref(),
        );
        let ssh_port = free_port();
        let cdrom = match &spec.cdrom {
            Some(iso) => format!(
                "if=none,id=cd0,media=cdrom,format=raw,readonly=on,file={}",
                iso.display()
            ),
            None => "if=none,id=cd0,media=cdrom".to_string(),
        };
        let mut cmd = Command::new("qemu-system-x86_64");
        cmd.args(["-machine", "pc"])
            .args(accel.args())
            .args([
                "-smp",
                &spec.cpus.to_string(),
                "-m",
                &spec.memory_mb.to_string(),
            ])
            .args(["-nodefaults", "-display", "none", "-no-reboot"])
            .arg("-kernel")
            .arg(image.dir.join("vmlinuz"))
            .arg("-initrd")
            .arg(image.dir.join("initrd.img"))
            // tsc=reliable: with two vCPUs under multi-threaded TCG the kernel's TSC
            // synchronisation check fails ("Marking TSC unstable due to TSCs
            // unsynchronized") and it falls back to the HPET, whose every read is an
            // emulated MMIO access: clock_gettime took 5.6-13.5 µs against 0.1-0.9 µs
            // on the TSC (a static loop of 100,000 calls in the guest, both VMs booted
            // side by side). TCG's TSC is derived from the host's clock on every vCPU, so
            // it is as reliable as the kernel is then told; the 1-vCPU cluster nodes
            // kept the TSC all along.
            .args([
                "-append",
                "root=/dev/vda rw console=ttyS0 mitigations=off tsc=reliable",
            ])
            .arg("-drive")
            .arg(format!("file={},if=virtio,format=qcow2", overlay.display()))
            // The Kubernetes ISO drive: IDE, as CloudStack on KVM attaches it.
            .args(["-drive", &cdrom])
            .args(["-device", "ide-cd,drive=cd0,id=cdrom0,bus=ide.1,unit=0"])
            // The config drive (NoCloud seed), also an IDE CD-ROM.
            .arg("-drive")
            .arg(format!(
                "if=none,id=seed,media=cdrom,format=raw,readonly=on,file={}",
                seed.display()
            ))
            .args(["-device", "ide-cd,drive=seed,id=cdrom1,bus=ide.1,unit=1"])
            .arg("-netdev")
            .arg(format!(
                "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{ssh_port}-:22"
            ))
            .args([
                "-device",
                &format!("virtio-net-pci,netdev=n0,mac={NAT_MAC}"),
            ])
            .args(store_nic_args(&spec.guest_forwards))
            // append=on: a reboot (a new qemu on the same disk) keeps the first console.
            .arg("-chardev")
            .arg(format!(
                "file,id=ser0,append=on,path={}",
                dir.join("console.log").display()
            ))
            .args(["-serial", "chardev:ser0"])
            .arg("-qmp")
            .arg(format!(
                "unix:{},server=on,wait=off",
                dir.join("qmp.sock").display()
            ))
            .arg("-pidfile")
            .arg(dir.join("qemu.pid"))
            .args(&spec.extra_args);
        let command: Vec<std::ffi::OsString> = cmd.get_args().map(|a| a.to_os_string()).collect();
        let started = Instant::now();
        let child = spawn_qemu(&dir, &command);
        Vm {
            name: spec.name,
            dir,
            ssh_port,
            started,
            accel,
            child,
            qmp: None,
            command,
            restarted: false,
        }
    }

    /// Shuts the guest down cleanly and boots it again from the same disk, as a reboot
    /// (qemu runs with -no-reboot, so a guest reboot would end qemu).
    pub fn reboot(&mut self) {
        self.ask_power_off();
        self.await_power_off();
        self.power_on();
    }

    /// Asks the guest to power off (`systemctl poweroff`), without waiting.
    pub fn ask_power_off(&self) {
        let _ = self.ssh_timeout(Duration::from_secs(30), "sudo systemctl poweroff");
    }

    /// Waits for qemu to end after [`Vm::ask_power_off`] (at most 120 s).
    pub fn await_power_off(&mut self) {
        let exited = wait_child(&mut self.child, Duration::from_secs(120));
        assert!(
            exited.is_some(),
            "{}: did not power off within 120 s",
            self.name
        );
        self.qmp = None;
    }

    /// Boots the powered-off guest again from its disk (its CD-ROM drive empty, as qemu's
    /// command line has it).
    pub fn power_on(&mut self) {
        self.started = Instant::now();
        self.child = spawn_qemu(&self.dir, &self.command);
    }

    /// The guest's clock minus the host's, in seconds, taken low: the guest read its clock
    /// before the reply reached the host, so latencies computed with it (guest time of
    /// an event minus this, minus host time of the cause) are upper bounds.
    pub fn clock_offset(&self) -> f64 {
        let out = self.ssh_ok("date +%s.%N");
        let after = unix_now();
        let guest: f64 = out.trim().parse().expect("guest date");
        guest - after
    }

    /// Fails the test if qemu has exited, with its stderr.
    fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            let err = fs::read_to_string(self.dir.join("qemu.err")).unwrap_or_default();
            panic!("{}: qemu exited ({status}): {err}", self.name);
        }
    }

    /// While the guest boots (before SSH answers), qemu under multi-threaded TCG can abort
    /// on its own assertion: seen in CI as `iotlb_to_section: Assertion section_index <
    /// d->map.sections_nb` while the kernel probed PCI, 1.4 s into the boot, a race in
    /// qemu's memory map between vCPU threads and nothing the guest or etcd-setup did. qemu
    /// is started again once on the same disk, as after a power cut (which a node must
    /// survive), and the report says so; any other exit, or a second abort, fails the test.
    fn restart_after_qemu_abort(&mut self) {
        let Ok(Some(status)) = self.child.try_wait() else {
            return;
        };
        let err = fs::read_to_string(self.dir.join("qemu.err")).unwrap_or_default();
        let aborted = std::os::unix::process::ExitStatusExt::signal(&status) == Some(6)
            && err.contains("Assertion");
        if !aborted || self.restarted {
            panic!("{}: qemu exited ({status}): {err}", self.name);
        }
        report(&format!(
            "{}: qemu aborted on its own assertion {:.1} s into the boot ({}); started again \
             on the same disk",
            self.name,
            self.started.elapsed().as_secs_f64(),
            err.trim()
        ));
        fs::rename(self.dir.join("qemu.err"), self.dir.join("qemu.err.aborted"))
            .expect("keep the aborted qemu's stderr");
        self.restarted = true;
        self.qmp = None;
        self.started = Instant::now();
        self.child = spawn_qemu(&self.dir, &self.command);
    }

    fn ssh_command(&self, limit: Duration, remote: &str) -> Command {
        ssh_command(self.ssh_port, limit, remote)
    }

    /// Waits until `cloud` can log in over SSH; returns the time since qemu started.
    pub fn wait_ssh(&mut self, limit: Duration) -> Duration {
        let mut deadline = self.started + limit;
        loop {
            if self.child.try_wait().ok().flatten().is_some() {
                self.restart_after_qemu_abort();
                deadline = self.started + limit;
            }
            let ok = self
                .ssh_command(Duration::from_secs(10), "true")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                let took = self.started.elapsed();
                boot_logged(&self.name, took);
                return took;
            }
            assert!(
                Instant::now() < deadline,
                "{}: no SSH login within {} s",
                self.name,
                limit.as_secs()
            );
            // No event from the guest to await before sshd answers: retry soon.
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// Runs a command as `cloud` in the guest, at most `limit`.
    pub fn ssh_timeout(&self, limit: Duration, remote: &str) -> Output {
        output_connected(&self.name, || self.ssh_command(limit, remote))
    }

    /// cloud-init's own schema check of the user-data the guest got; returns what it said.
    /// A Python tool that loads every module's schema: in a one-vCPU TCG guest while
    /// three other guests boot it passed 120 s in CI, so it gets 300 s.
    pub fn cloud_init_schema(&self) -> String {
        let command =
            "sudo cloud-init schema --config-file /var/lib/cloud/instance/user-data.txt 2>&1";
        let out = self.ssh_timeout(Duration::from_secs(300), command);
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && said.contains("Valid cloud-config"),
            "{}: `{command}` failed ({}): {said}",
            self.name,
            out.status
        );
        said
    }

    /// Runs a command as `cloud` in the guest (at most 120 s).
    pub fn ssh(&self, remote: &str) -> Output {
        self.ssh_timeout(Duration::from_secs(120), remote)
    }

    /// Copies the host file `local` to `remote` in the guest (as `cloud`, over SSH).
    pub fn copy_in(&self, local: &Path, remote: &str) {
        let file =
            fs::File::open(local).unwrap_or_else(|e| panic!("open {}: {e}", local.display()));
        let out = self
            .ssh_command(Duration::from_secs(120), &format!("cat > '{remote}'"))
            .stdin(file)
            .output()
            .expect("run ssh");
        assert!(
            out.status.success(),
            "{}: copying {} to {remote} failed: {}",
            self.name,
            local.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// What Debian's prometheus-node-exporter in the image serves on its port right after
    /// etcd-setup-metrics.service wrote the agent's view into its textfile folder: every
    /// `etcd_setup_*` sample and the textfile collector's own about our file, by name
    /// (labels included).
    pub fn scrape_node_exporter(&self) -> std::collections::BTreeMap<String, f64> {
        let script = "systemctl start etcd-setup-metrics.service && bash -c 'exec \
             3<>/dev/tcp/127.0.0.1/9100 && printf \"GET /metrics HTTP/1.0\\r\\nHost: \
             localhost\\r\\n\\r\\n\" >&3 && cat <&3'";
        let text = self.ssh_ok(&format!("sudo sh -c '{}'", script.replace('\'', "'\\''")));
        assert!(
            text.starts_with("HTTP/1.0 200"),
            "{}: node-exporter: {text:.300}",
            self.name
        );
        let samples: std::collections::BTreeMap<String, f64> = text
            .lines()
            .filter(|l| l.starts_with("etcd_setup_") || l.contains("etcd-setup.prom"))
            .filter_map(|l| {
                let (name, value) = l.rsplit_once(' ')?;
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect();
        assert!(
            samples
                .keys()
                .any(|k| k.starts_with("etcd_setup_status_up")),
            "{}: node-exporter serves no etcd_setup_ samples: {text:.2000}",
            self.name
        );
        samples
    }

    /// Runs a command that must succeed; returns its stdout.
    pub fn ssh_ok(&self, remote: &str) -> String {
        let out = self.ssh(remote);
        assert!(
            out.status.success(),
            "{}: `{remote}` failed ({}):\nstdout: {}\nstderr: {}",
            self.name,
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A shareable way into the guest over one kept SSH connection.
    pub fn remote(&self) -> Remote {
        Remote {
            name: self.name.clone(),
            port: self.ssh_port,
            control: self.dir.join("ssh.mux"),
        }
    }

    /// The VM's QMP connection (opened on first use).
    pub fn qmp(&mut self) -> &mut Qmp {
        if self.qmp.is_none() {
            self.assert_running();
            self.qmp = Some(Qmp::connect(
                &self.dir.join("qmp.sock"),
                Duration::from_secs(10),
            ));
        }
        self.qmp.as_mut().expect("qmp connected")
    }

    /// Inserts an ISO into the Kubernetes CD-ROM drive, as the platform attaches one
    /// (`blockdev-change-medium`). Not tried again on "locked": each refused try still
    /// sends the guest an eject request, which it may carry out after a later try
    /// succeeded, taking the new disc out (a local CI-like run of 1357dec waited 400 s for
    /// a disc inserted after a retried "locked").
    pub fn insert_cdrom(&mut self, iso: &Path) {
        self.change_medium(iso, false);
    }

    /// Inserts an ISO as libvirt does (`force`: the tray opened even where the guest
    /// locked it): for the insert benchmark, whose baseline agent (97a6b61) holds the
    /// drive open and locked while it waits, so that a plain insert meets "locked".
    pub fn insert_cdrom_forced(&mut self, iso: &Path) {
        self.change_medium(iso, true);
    }

    /// `blockdev-change-medium` of `iso` into the Kubernetes CD-ROM drive.
    fn change_medium(&mut self, iso: &Path, force: bool) {
        let iso = iso.to_str().expect("utf-8 path").to_string();
        let name = self.name.clone();
        let mut args = json!({"id": "cdrom0", "filename": iso, "format": "raw", "read-only-mode": "read-only"});
        if force {
            args["force"] = json!(true);
        }
        self.qmp()
            .execute("blockdev-change-medium", args)
            .unwrap_or_else(|e| {
                let how = if force { " (forced)" } else { "" };
                panic!("{name}: insert {iso}{how}: {e}")
            });
    }

    /// Brings the link of the NIC with qemu device ID `nic` down or up (QMP `set_link`):
    /// the guest sees its carrier go, and no frame crosses it either way until it is up.
    pub fn set_link(&mut self, nic: &str, up: bool) {
        self.qmp()
            .execute("set_link", json!({"name": nic, "up": up}))
            .unwrap_or_else(|e| panic!("{}: set_link {nic} {up}: {e}", self.name));
    }

    /// Ejects the Kubernetes CD-ROM (forced: the guest may hold the tray locked).
    pub fn eject_cdrom(&mut self) {
        self.qmp()
            .execute("eject", json!({"id": "cdrom0", "force": true}))
            .unwrap_or_else(|e| panic!("eject: {e}"));
    }

    /// The serial console so far.
    pub fn console(&self) -> String {
        fs::read_to_string(self.dir.join("console.log")).unwrap_or_default()
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // A kept SSH connection (see `remote`) ends with the VM.
        let mux = self.dir.join("ssh.mux");
        if mux.exists() {
            let _ = Command::new("ssh")
                .arg("-o")
                .arg(format!("ControlPath={}", mux.display()))
                .args(["-O", "exit", "cloud@127.0.0.1"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        // Killed by its own PID, whatever state the test left it in.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let console = self.console();
            let lines: Vec<&str> = console.lines().collect();
            let tail = &lines[lines.len().saturating_sub(80)..];
            eprintln!(
                "---- {} serial console (last {} lines; whole log kept at {}) ----\n{}\n----",
                self.name,
                tail.len(),
                self.dir.join("console.log").display(),
                tail.join("\n")
            );
        } else {
            // Keep the console log, drop the overlay (hundreds of MB after a run).
            let _ = fs::remove_file(self.dir.join("overlay.qcow2"));
        }
    }
}

/// A QMP connection to one VM.
pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    /// Events received so far, in order.
    pub events: Vec<Value>,
}

impl Qmp {
    /// Connects (qemu creates the socket at start) and negotiates capabilities.
    pub fn connect(path: &Path, limit: Duration) -> Qmp {
        let deadline = Instant::now() + limit;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("connect QMP {}: {e}", path.display()),
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let writer = stream.try_clone().expect("clone");
        let mut qmp = Qmp {
            reader: BufReader::new(stream),
            writer,
            events: Vec::new(),
        };
        let greeting = qmp.read_message();
        assert!(
            greeting.get("QMP").is_some(),
            "not a QMP greeting: {greeting}"
        );
        qmp.execute("qmp_capabilities", json!({}))
            .expect("qmp_capabilities");
        qmp
    }

    fn read_message(&mut self) -> Value {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("read QMP");
        assert!(n > 0, "QMP closed");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad QMP line {line:?}: {e}"))
    }

    /// Runs a command; events arriving meanwhile are kept in `events`.
    pub fn execute(&mut self, command: &str, arguments: Value) -> Result<Value, String> {
        let msg = json!({"execute": command, "arguments": arguments});
        writeln!(self.writer, "{msg}").expect("write QMP");
        loop {
            let reply = self.read_message();
            if reply.get("event").is_some() {
                self.events.push(reply);
            } else if let Some(ret) = reply.get("return") {
                return Ok(ret.clone());
            } else if let Some(err) = reply.get("error") {
                return Err(err.to_string());
            }
        }
    }
}

/// The value of the sample `name` (labels included) among `samples`.
pub fn sample(samples: &std::collections::BTreeMap<String, f64>, name: &str) -> f64 {
    *samples
        .get(name)
        .unwrap_or_else(|| panic!("no {name} among {samples:?}"))
}
