//! The listening socket: taken from systemd (LISTEN_FDS) or bound at a path.

use anyhow::{bail, Context};
use std::os::fd::FromRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

/// The listening socket systemd passed (`LISTEN_PID` is this process, `LISTEN_FDS` ≥ 1:
/// fd 3), made close-on-exec; the variables are removed so no child sees them. `None`
/// when systemd passed nothing.
pub fn socket_from_systemd() -> anyhow::Result<Option<UnixListener>> {
    let (Some(pid), Some(fds)) = (
        std::env::var_os("LISTEN_PID"),
        std::env::var_os("LISTEN_FDS"),
    ) else {
        return Ok(None);
    };
    if pid.to_str().and_then(|p| p.parse::<u32>().ok()) != Some(std::process::id()) {
        return Ok(None);
    }
    for var in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] {
        std::env::remove_var(var);
    }
    let count: u32 = fds
        .to_str()
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("LISTEN_FDS={fds:?} is not a number"))?;
    if count == 0 {
        return Ok(None);
    }
    const FIRST: i32 = 3;
    let stat = nix::sys::stat::fstat(unsafe { std::os::fd::BorrowedFd::borrow_raw(FIRST) })
        .context("systemd passed fd 3, but it is not open")?;
    if stat.st_mode & libc_s_ifmt() != libc_s_ifsock() {
        bail!("systemd passed fd 3, but it is not a socket");
    }
    // SAFETY: fd 3 is open (fstat succeeded), a socket, and ours alone from here on:
    // systemd hands it to this process, and nothing else in it uses fd 3.
    let listener = unsafe { UnixListener::from_raw_fd(FIRST) };
    nix::fcntl::fcntl(
        &listener,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    )
    .context("cannot make the passed socket close-on-exec")?;
    Ok(Some(listener))
}

/// Where `listener` listens, as a log line names it: the path it is bound at
/// (getsockname, so a socket systemd passed is named wherever its unit put it), `@NAME`
/// for an abstract socket, or what is known when it has neither.
pub fn address(listener: &UnixListener) -> String {
    use std::os::linux::net::SocketAddrExt;
    match listener.local_addr() {
        Ok(addr) => match (addr.as_pathname(), addr.as_abstract_name()) {
            (Some(path), _) => path.display().to_string(),
            (None, Some(name)) => format!("@{}", String::from_utf8_lossy(name)),
            (None, None) => "an unnamed socket".to_string(),
        },
        Err(e) => format!("a socket whose address is unknown ({e})"),
    }
}

pub(super) fn libc_s_ifmt() -> u32 {
    nix::sys::stat::SFlag::S_IFMT.bits()
}

pub(super) fn libc_s_ifsock() -> u32 {
    nix::sys::stat::SFlag::S_IFSOCK.bits()
}

/// Binds `path`, replacing a stale socket left there, mode 0666 (access is decided by
/// peer credentials, so everyone gets a clear refusal rather than EACCES).
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    match UnixStream::connect(path) {
        Ok(_) => bail!("{} is already served by another process", path.display()),
        Err(_) => {
            use std::os::unix::fs::FileTypeExt;
            if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    let listener =
        UnixListener::bind(path).with_context(|| format!("cannot bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .with_context(|| format!("cannot chmod {}", path.display()))?;
    Ok(listener)
}
