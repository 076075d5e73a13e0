//! The inotify watch on the live state folder: a generation that moves with every change.

use anyhow::Context;
use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::Mutex;

/// The inotify watch on the live state folder: a generation that moves with every
/// change. Read without blocking by whoever needs it (the loop when its fd is readable,
/// the evaluator before every evaluation), under one lock, so that a reader which finds
/// the queue empty knows every earlier event has been counted.
pub struct Watch {
    pub(super) inotify: Option<Inotify>,
    pub(super) state: Mutex<WatchState>,
}

#[derive(Default)]
pub(super) struct WatchState {
    pub(super) generation: u64,
    /// The watch ended (folder removed or moved, read error): changes go unseen.
    pub(super) lost: bool,
}

impl Watch {
    /// Watches `dir` (created when missing) for files created, written, replaced or
    /// removed. Without inotify the watch is absent: [`Watch::current`] then says it is
    /// not reliable.
    pub fn new(dir: &Path) -> anyhow::Result<Watch> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
            .context("cannot start inotify")?;
        inotify
            .add_watch(
                dir,
                AddWatchFlags::IN_CLOSE_WRITE
                    | AddWatchFlags::IN_MODIFY
                    | AddWatchFlags::IN_MOVED_TO
                    | AddWatchFlags::IN_MOVED_FROM
                    | AddWatchFlags::IN_CREATE
                    | AddWatchFlags::IN_DELETE
                    | AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF,
            )
            .with_context(|| format!("cannot watch {}", dir.display()))?;
        Ok(Watch {
            inotify: Some(inotify),
            state: Mutex::default(),
        })
    }

    /// No watch: nothing is reliable, waiters re-check every second.
    pub fn absent() -> Watch {
        Watch {
            inotify: None,
            state: Mutex::new(WatchState {
                generation: 0,
                lost: true,
            }),
        }
    }

    /// Reads the queued events and returns the generation, and whether it can be trusted
    /// to move on every change (a watch that is there and not lost).
    pub fn current(&self) -> (u64, bool) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(inotify) = &self.inotify {
            while !state.lost {
                match inotify.read_events() {
                    Ok(events) => {
                        state.generation += 1;
                        let gone = AddWatchFlags::IN_IGNORED
                            | AddWatchFlags::IN_DELETE_SELF
                            | AddWatchFlags::IN_MOVE_SELF
                            | AddWatchFlags::IN_UNMOUNT;
                        if events.iter().any(|e| e.mask.intersects(gone)) {
                            state.lost = true;
                        }
                    }
                    Err(Errno::EINTR) => {}
                    Err(Errno::EAGAIN) => break,
                    Err(_) => state.lost = true,
                }
            }
        }
        (state.generation, !state.lost)
    }

    pub(super) fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        // A lost watch may stay readable forever; the loop stops polling it.
        (!state.lost).then_some(())?;
        self.inotify.as_ref().map(|i| i.as_fd())
    }
}
