//! The pieces every command shares: the configuration ([`config`]), the node's record
//! ([`report`], its only writer), systemd over D-Bus ([`systemd`]), etcd's unit
//! ([`unit`]), this member's URLs and tools ([`member`]), etcd.service controlled
//! ([`service`]: stop, start, confirm, one-shot flags), the node lock ([`lock`]), signals
//! ([`signals`]), the advisory table ([`advisory`]), and output ([`output`], [`printable`]).

pub mod advisory;
pub mod config;
pub mod lock;
pub mod member;
pub mod output;
pub mod paths;
pub mod printable;
pub mod report;
pub mod service;
pub mod signals;
pub mod systemd;
pub mod unit;
