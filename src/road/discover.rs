//! Finding the Kubernetes ISO: look at the block devices that exist, then react to the
//! kernel's uevents for new devices and media changes, until a disc holding the etcd
//! archive (or a Kubernetes ISO without one) appears or the wait runs out.
//!
//! - Events come straight from the kernel (netlink `NETLINK_KOBJECT_UEVENT`, group 1), not
//!   from udev: the disc is read in userspace, so udev's labels are not needed and its
//!   processing time is saved. The socket is opened before the first scan, so no event
//!   falls between the scan and the wait.
//! - The kernel only notices a medium change by polling the drive; systemd's udev rules
//!   set that to 2 s. While waiting we set each CD-ROM's `events_poll_msecs` to
//!   [`FAST_POLL_MS`] so an inserted disc is noticed within a second, and restore the old
//!   value when done.
//! - Discs are told apart by content: the archive path, or a Kubernetes ISO's `k8s/`
//!   folder (an ISO built without etcd), versus cloud-init seeds and config drives, which
//!   are left alone and never mounted.

use crate::reason::{Failure, ReasonCode};
use crate::road::iso9660::{self, IsoFile, IsoImage};
use nix::sys::socket::{
    bind, recvfrom, socket, AddressFamily, NetlinkAddr, SockFlag, SockProtocol, SockType,
};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The media-change poll interval set on CD-ROM drives while waiting, in milliseconds.
pub const FAST_POLL_MS: u32 = 250;

/// What a block device holds, as far as finding the Kubernetes ISO is concerned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disc {
    /// The drive has no medium (or it is not ready yet).
    NoMedium,
    /// Not an ISO 9660 filesystem (the root disk, for instance).
    NotIso,
    /// An ISO 9660 disc that could not be read.
    Unreadable(String),
    /// A cloud-init seed or config drive: left alone.
    Seed {
        /// Volume label.
        label: String,
    },
    /// Some other ISO 9660 disc: left alone.
    OtherIso {
        /// Volume label.
        label: String,
    },
    /// A disc whose archive path is a link or another special file: refused as the
    /// archive pass refuses one inside the tarball.
    UnsafeArchive {
        /// Volume label.
        label: String,
        /// What the reader found there.
        why: String,
    },
    /// The Kubernetes ISO.
    Kubernetes {
        /// Volume label.
        label: String,
        /// Whether it holds the etcd archive.
        has_archive: bool,
        /// Its top-level names (for the archive-missing detail).
        top_level: Vec<String>,
    },
}

impl Disc {
    /// A few words for the list of what was seen, e.g. `iso9660, label CIDATA, cloud-init seed`.
    pub fn describe(&self) -> String {
        match self {
            Disc::NoMedium => "no medium".into(),
            Disc::NotIso => "not iso9660".into(),
            Disc::Unreadable(e) => format!("unreadable iso9660: {e}"),
            Disc::Seed { label } => format!("iso9660, label {label}, cloud-init seed"),
            Disc::UnsafeArchive { label, why } => {
                format!("iso9660, label {label}, unsafe archive path: {why}")
            }
            Disc::OtherIso { label } => {
                format!("iso9660, label {label}, neither the etcd archive nor a k8s/ folder")
            }
            Disc::Kubernetes {
                label, has_archive, ..
            } => format!(
                "iso9660, label {label}, Kubernetes ISO {} etcd",
                if *has_archive { "with" } else { "without" }
            ),
        }
    }
}

/// The Kubernetes ISO holding the archive, as discovery read it: the open disc, its
/// parsed image and the archive's entry. The validator reads the archive from it, so the
/// disc is opened and parsed once ([`crate::road::source::validate_found`]).
pub struct FoundIso {
    /// The device, e.g. `/dev/sr0`.
    pub device: PathBuf,
    /// Its volume label.
    pub label: String,
    /// The parsed image, over the open device.
    pub image: IsoImage<File>,
    /// The archive's entry in it.
    pub archive: IsoFile,
    /// When discovery began to look at the device (right after its uevent, or in the
    /// first scan).
    pub seen_at: std::time::SystemTime,
}

/// Reads enough of `device` to tell what it holds. Reads only volume descriptors and
/// directories, never the archive.
pub fn classify(device: &Path, archive_path: &str) -> Disc {
    look(device, archive_path).0
}

impl std::fmt::Debug for FoundIso {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FoundIso")
            .field("device", &self.device)
            .field("label", &self.label)
            .field("archive", &self.archive)
            .field("seen_at", &self.seen_at)
            .finish_non_exhaustive()
    }
}

/// [`classify`], keeping the open, parsed disc when it holds the archive.
fn look(device: &Path, archive_path: &str) -> (Disc, Option<FoundIso>) {
    let seen_at = std::time::SystemTime::now();
    // A drive that says it is empty or open is not opened for data: that open would pull
    // an open tray in (the kernel's autoclose) and lock the door while it lasts, and the
    // platform's next attach of the ISO would meet a closed, locked, empty drive.
    if drive_has_disc(device) == Some(false) {
        return (Disc::NoMedium, None);
    }
    let mut file = match File::open(device) {
        Ok(f) => f,
        // ENOMEDIUM: empty drive. EIO/ENXIO right after a change: not ready yet; a later
        // event brings us back.
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc_errno::ENOMEDIUM | libc_errno::ENXIO)
            ) =>
        {
            return (Disc::NoMedium, None)
        }
        Err(e) => return (Disc::Unreadable(format!("cannot open: {e}")), None),
    };
    match iso9660::is_iso9660(&mut file) {
        Ok(true) => {}
        Ok(false) => return (Disc::NotIso, None),
        Err(e) if e.raw_os_error() == Some(libc_errno::ENOMEDIUM) => return (Disc::NoMedium, None),
        Err(e) => return (Disc::Unreadable(e.to_string()), None),
    }
    let mut iso = match IsoImage::open(file) {
        Ok(iso) => iso,
        Err(e) => return (Disc::Unreadable(e.to_string()), None),
    };
    let label = iso.volume_label().to_string();
    let archive = match iso.find(archive_path) {
        Ok(found) => found,
        Err(e) if e.is_unsafe() => {
            let why = e.to_string();
            return (Disc::UnsafeArchive { label, why }, None);
        }
        Err(e) => return (Disc::Unreadable(e.to_string()), None),
    };
    let top_level = iso.list_root().unwrap_or_default();
    let has = |name: &str| top_level.iter().any(|n| n.eq_ignore_ascii_case(name));
    if archive.is_some() || has("k8s") {
        let disc = Disc::Kubernetes {
            label: label.clone(),
            has_archive: archive.is_some(),
            top_level,
        };
        let found = archive.map(|archive| FoundIso {
            device: device.to_path_buf(),
            label,
            image: iso,
            archive,
            seen_at,
        });
        return (disc, found);
    }
    let seed_label = ["cidata", "config-2"]
        .iter()
        .any(|l| label.eq_ignore_ascii_case(l));
    if seed_label || (has("user-data") && has("meta-data")) || has("openstack") {
        (Disc::Seed { label }, None)
    } else {
        (Disc::OtherIso { label }, None)
    }
}

/// errno values nix does not re-export as plain integers.
mod libc_errno {
    pub const ENOMEDIUM: i32 = nix::errno::Errno::ENOMEDIUM as i32;
    pub const ENXIO: i32 = nix::errno::Errno::ENXIO as i32;
}

/// Whole-disk block devices worth looking at: not partitions, not loop, RAM or mapper
/// devices. Sorted by name.
pub fn block_devices(sys_block: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(sys_block) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| is_candidate(n))
        .filter(|n| !sys_block.join(n).join("partition").exists())
        .collect();
    names.sort();
    names
}

fn is_candidate(name: &str) -> bool {
    const SKIP: [&str; 7] = ["loop", "ram", "zram", "nbd", "dm-", "md", "fd"];
    !SKIP.iter().any(|p| name.starts_with(p))
}

/// One kernel uevent, the fields we use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uevent {
    /// `add`, `change`, `remove`, ...
    pub action: String,
    /// `block`, `scsi`, ...
    pub subsystem: String,
    /// Kernel name of the device node, e.g. `sr0`.
    pub devname: Option<String>,
    /// `disk` or `partition` for block devices.
    pub devtype: Option<String>,
}

/// Parses a kernel uevent datagram: `ACTION@DEVPATH\0KEY=VALUE\0...`. udev's own
/// re-broadcasts (which start with `libudev`) and anything malformed give `None`.
pub fn parse_uevent(buf: &[u8]) -> Option<Uevent> {
    let mut fields = buf.split(|&b| b == 0).filter(|f| !f.is_empty());
    let header = std::str::from_utf8(fields.next()?).ok()?;
    if !header.contains('@') || header.starts_with("libudev") {
        return None;
    }
    let mut ev = Uevent {
        action: String::new(),
        subsystem: String::new(),
        devname: None,
        devtype: None,
    };
    for field in fields {
        let Ok(text) = std::str::from_utf8(field) else {
            continue;
        };
        let Some((key, value)) = text.split_once('=') else {
            continue;
        };
        match key {
            "ACTION" => ev.action = value.to_string(),
            "SUBSYSTEM" => ev.subsystem = value.to_string(),
            "DEVNAME" => ev.devname = Some(value.trim_start_matches("/dev/").to_string()),
            "DEVTYPE" => ev.devtype = Some(value.to_string()),
            _ => {}
        }
    }
    (!ev.action.is_empty()).then_some(ev)
}

/// A socket receiving the kernel's uevents.
pub struct Uevents {
    fd: OwnedFd,
}

impl Uevents {
    /// Opens and binds the socket to the kernel's multicast group.
    pub fn open() -> io::Result<Uevents> {
        let fd = socket(
            AddressFamily::Netlink,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
            SockProtocol::NetlinkKObjectUEvent,
        )?;
        bind(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            &NetlinkAddr::new(0, 1),
        )?;
        Ok(Uevents { fd })
    }

    /// Waits at most `timeout` for events, then returns every block event pending.
    pub fn wait(&self, timeout: Duration) -> io::Result<Vec<Uevent>> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(Vec::new()),
            Err(e) => return Err(e.into()),
        }
        let mut events = Vec::new();
        let mut buf = vec![0u8; 8192];
        loop {
            let raw = std::os::fd::AsRawFd::as_raw_fd(&self.fd);
            match recvfrom::<NetlinkAddr>(raw, &mut buf) {
                Ok((n, from)) => {
                    // Only the kernel (port 0) speaks on this group; ignore anyone else.
                    if from.map(|a| a.pid()) != Some(0) {
                        continue;
                    }
                    if let Some(ev) = parse_uevent(&buf[..n]) {
                        if ev.subsystem == "block" {
                            events.push(ev);
                        }
                    }
                }
                Err(nix::errno::Errno::EAGAIN) => break,
                // The kernel dropped events for us: rescan instead of trusting the queue.
                Err(nix::errno::Errno::ENOBUFS) => {
                    events.push(Uevent {
                        action: "rescan".into(),
                        subsystem: "block".into(),
                        devname: None,
                        devtype: None,
                    });
                    break;
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(events)
    }
}

/// Sets the CD-ROM drives' media-change poll interval to [`FAST_POLL_MS`] and puts the
/// old values back when dropped.
pub struct FastMediaPoll {
    saved: Vec<(PathBuf, String)>,
}

impl FastMediaPoll {
    /// Speeds up polling on every `sr*` drive under `sys_block` that allows it.
    pub fn enable(sys_block: &Path) -> FastMediaPoll {
        let mut saved = Vec::new();
        for name in block_devices(sys_block)
            .into_iter()
            .filter(|n| n.starts_with("sr"))
        {
            let path = sys_block.join(&name).join("events_poll_msecs");
            if let Ok(old) = fs::read_to_string(&path) {
                if fs::write(&path, FAST_POLL_MS.to_string()).is_ok() {
                    saved.push((path, old.trim().to_string()));
                }
            }
        }
        FastMediaPoll { saved }
    }
}

impl Drop for FastMediaPoll {
    fn drop(&mut self) {
        for (path, old) in &self.saved {
            let _ = fs::write(path, old);
        }
    }
}

/// How the wait for the ISO is set up.
pub struct Wait<'a> {
    /// Where the archive sits inside the ISO.
    pub archive_path: &'a str,
    /// How long to wait.
    pub limit: Duration,
    /// `/sys/block` (a different folder in tests).
    pub sys_block: &'a Path,
    /// `/dev`.
    pub dev: &'a Path,
}

/// Waits for the Kubernetes ISO. Returns the disc holding the archive, opened and parsed;
/// a Kubernetes ISO without it fails at once with `archive-missing`; none in time fails
/// with `iso-timeout` listing every device seen. `progress` is called about every 5 s
/// with the time waited so far.
pub fn wait_for_iso(
    wait: &Wait<'_>,
    mut progress: impl FnMut(Duration),
) -> Result<FoundIso, Failure> {
    let started = Instant::now();
    let deadline = started + wait.limit;
    // Open the socket before the first scan: an insert between the two is not lost.
    let uevents = Uevents::open();
    let _fast = FastMediaPoll::enable(wait.sys_block);
    let mut seen: BTreeMap<String, Disc> = BTreeMap::new();

    let check = |name: &str, seen: &mut BTreeMap<String, Disc>| {
        let path = wait.dev.join(name);
        let (disc, found) = look(&path, wait.archive_path);
        let found = match (&disc, found) {
            (_, Some(found)) => Some(Ok(found)),
            (
                Disc::Kubernetes {
                    label, top_level, ..
                },
                None,
            ) => Some(Err(Failure::archive_missing(
                path.display(),
                label,
                wait.archive_path,
                top_level,
            ))),
            (Disc::UnsafeArchive { label, why }, None) => Some(Err(Failure::new(
                ReasonCode::ArchiveUnsafe,
                format!(
                    "{}:{} (label {label}) on the Kubernetes ISO is refused: {why}",
                    path.display(),
                    wait.archive_path
                ),
            ))),
            _ => None,
        };
        seen.insert(name.to_string(), disc);
        found
    };

    for name in block_devices(wait.sys_block) {
        if let Some(found) = check(&name, &mut seen) {
            return found;
        }
    }
    let tick = Duration::from_secs(5);
    let mut next_progress = started + tick;
    loop {
        let now = Instant::now();
        if now >= deadline {
            break;
        }
        if now >= next_progress {
            progress(now - started);
            next_progress += tick;
        }
        let slice = deadline.min(next_progress) - now;
        let names: Vec<String> = match &uevents {
            Ok(u) => {
                let events = u.wait(slice).map_err(|e| {
                    Failure::new(
                        ReasonCode::InternalError,
                        format!("cannot read kernel uevents: {e}"),
                    )
                    .with_source(e)
                })?;
                if events.iter().any(|e| e.action == "rescan") {
                    block_devices(wait.sys_block)
                } else {
                    events
                        .into_iter()
                        .filter(|e| matches!(e.action.as_str(), "add" | "change"))
                        .filter(|e| e.devtype.as_deref() != Some("partition"))
                        .filter_map(|e| e.devname)
                        .filter(|n| is_candidate(n))
                        .collect()
                }
            }
            // No uevent socket (a container, say): rescan once a second instead.
            Err(_) => {
                std::thread::sleep(slice.min(Duration::from_secs(1)));
                block_devices(wait.sys_block)
            }
        };
        for name in names {
            if let Some(found) = check(&name, &mut seen) {
                return found;
            }
        }
    }
    let list = if seen.is_empty() {
        "no block devices".to_string()
    } else {
        seen.iter()
            .map(|(name, disc)| format!("/dev/{name} ({})", disc.describe()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(Failure::new(
        ReasonCode::IsoTimeout,
        format!(
            "no Kubernetes ISO with {} was attached within {} s; seen: {list}; attach the \
             ISO or raise [iso] wait",
            wait.archive_path,
            wait.limit.as_secs()
        ),
    ))
}

/// The CD-ROM ioctls (linux/cdrom.h); CDROMEJECT and CDROM_LOCKDOOR take no pointer,
/// hence nix's "bad" forms.
mod cdrom {
    nix::ioctl_none_bad!(eject, 0x5309);
    nix::ioctl_write_int_bad!(lockdoor, 0x5329);
    nix::ioctl_write_int_bad!(drive_status, 0x5326);
    /// CDSL_CURRENT: the slot in use.
    pub const CURRENT_SLOT: nix::libc::c_int = nix::libc::c_int::MAX;
    /// CDROM_DRIVE_STATUS answers: no disc, tray open.
    pub const NO_DISC: nix::libc::c_int = 1;
    pub const TRAY_OPEN: nix::libc::c_int = 2;
}

/// Whether the CD-ROM drive `device` holds a disc, as the drive says now
/// (CDROM_DRIVE_STATUS); `None` when it cannot tell (not a CD-ROM drive, no answer).
pub fn drive_has_disc(device: &Path) -> Option<bool> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: an empty drive opens too, and its tray is not pulled in.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(device)
        .ok()?;
    // SAFETY: CDROM_DRIVE_STATUS takes an integer (the slot) on an open CD-ROM fd.
    let status = unsafe { cdrom::drive_status(file.as_raw_fd(), cdrom::CURRENT_SLOT) }.ok()?;
    match status {
        cdrom::NO_DISC | cdrom::TRAY_OPEN => Some(false),
        4 => Some(true), // CDS_DISC_OK
        _ => None,
    }
}

/// A read failure (`iso-unreadable`) of the disc in the drive `device` becomes
/// `iso-removed` when the drive holds no disc any more: it was taken out while it was
/// read, which a read error alone does not tell (the kernel reports both as EIO).
pub fn removed_while_read(device: &Path, failure: Failure) -> Failure {
    if failure.code != ReasonCode::IsoUnreadable || drive_has_disc(device) != Some(false) {
        return failure;
    }
    let removed = Failure::new(
        ReasonCode::IsoRemoved,
        format!(
            "the disc was taken out of {} while it was read ({}); attach the ISO again and \
             leave it in the drive until etcd runs",
            device.display(),
            failure.message
        ),
    );
    match failure.source {
        Some(source) => removed.with_source(source),
        None => removed,
    }
}

/// Unlocks the tray and ejects the disc in `device` (a CD-ROM drive).
pub fn eject(device: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK: open the drive even if the medium is not ready.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
        .open(device)?;
    // SAFETY: both ioctls take an integer argument (or none) on an open CD-ROM fd.
    unsafe {
        let _ = cdrom::lockdoor(file.as_raw_fd(), 0);
        cdrom::eject(file.as_raw_fd())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_failure_off_a_cd_drive_stays_iso_unreadable() {
        // A file and a character device are no CD-ROM drives: the drive cannot say the
        // disc is gone, so the read error is what the operator gets.
        let file = tempfile::NamedTempFile::new().unwrap();
        for path in [
            file.path(),
            Path::new("/dev/null"),
            Path::new("/nonexistent/sr9"),
        ] {
            assert_eq!(drive_has_disc(path), None, "{}", path.display());
            let f = removed_while_read(
                path,
                Failure::new(
                    ReasonCode::IsoUnreadable,
                    "cannot read it: Input/output error",
                ),
            );
            assert_eq!(f.code, ReasonCode::IsoUnreadable);
            assert_eq!(f.message, "cannot read it: Input/output error");
        }
        // Other codes pass through untouched.
        let f = removed_while_read(file.path(), Failure::new(ReasonCode::ArchiveCorrupt, "x"));
        assert_eq!(f.code, ReasonCode::ArchiveCorrupt);
    }

    #[test]
    fn parses_a_kernel_media_change_event() {
        let msg =
            b"change@/devices/pci0000:00/0000:00:01.1/ata2/host1/target1:0:0/1:0:0:0/block/sr0\0\
ACTION=change\0DEVPATH=/devices/pci0000:00/0000:00:01.1/ata2/host1/target1:0:0/1:0:0:0/block/sr0\0\
SUBSYSTEM=block\0DISK_MEDIA_CHANGE=1\0MAJOR=11\0MINOR=0\0DEVNAME=sr0\0DEVTYPE=disk\0SEQNUM=2047\0";
        let ev = parse_uevent(msg).expect("parsed");
        assert_eq!(ev.action, "change");
        assert_eq!(ev.subsystem, "block");
        assert_eq!(ev.devname.as_deref(), Some("sr0"));
        assert_eq!(ev.devtype.as_deref(), Some("disk"));
    }

    #[test]
    fn ignores_udev_rebroadcasts_and_garbage() {
        assert_eq!(parse_uevent(b"libudev\0\xfe\xed\xca\xfe"), None);
        assert_eq!(parse_uevent(b""), None);
        assert_eq!(parse_uevent(b"\xff\xfe@\0ACTION=add\0"), None);
        assert_eq!(parse_uevent(b"no-at-sign\0ACTION=add\0"), None);
        assert_eq!(
            parse_uevent(b"add@/x\0SUBSYSTEM=block\0"),
            None,
            "no ACTION"
        );
    }

    #[test]
    fn lists_whole_disks_but_not_partitions_loops_or_ram() {
        let sys = tempfile::tempdir().unwrap();
        for name in ["sr0", "sr1", "vda", "vda1", "loop0", "ram0", "dm-0"] {
            fs::create_dir(sys.path().join(name)).unwrap();
        }
        fs::write(sys.path().join("vda1/partition"), "1").unwrap();
        assert_eq!(block_devices(sys.path()), ["sr0", "sr1", "vda"]);
    }

    #[test]
    fn fast_poll_is_set_on_cdroms_only_and_restored() {
        let sys = tempfile::tempdir().unwrap();
        for name in ["sr0", "vda"] {
            fs::create_dir(sys.path().join(name)).unwrap();
            fs::write(sys.path().join(name).join("events_poll_msecs"), "-1\n").unwrap();
        }
        let read =
            |n: &str| fs::read_to_string(sys.path().join(n).join("events_poll_msecs")).unwrap();
        {
            let _fast = FastMediaPoll::enable(sys.path());
            assert_eq!(read("sr0"), "250");
            assert_eq!(read("vda"), "-1\n");
        }
        assert_eq!(read("sr0"), "-1");
    }
}
