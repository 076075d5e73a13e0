//! The plumbing every part shares: the configuration ([`config`]), the node's record
//! ([`report`], its only writer), systemd over D-Bus ([`systemd`]), the node lock
//! ([`lock`]), signals ([`signals`]), the state folders and sockets ([`paths`]), a
//! length and SHA-256 ([`digest`]), an age recipient's spelling ([`age_key`]), the
//! advisory table ([`advisory`]), and output ([`output`], [`printable`]).

pub mod advisory;
pub mod age_key;
pub mod bolt;
pub mod config;
pub mod digest;
pub mod lock;
pub mod output;
pub mod paths;
pub mod printable;
pub mod report;
pub mod signals;
pub mod systemd;
