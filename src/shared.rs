//! The pieces every command shares: the configuration ([`config`]), the node's record
//! ([`report`], its only writer), systemd over D-Bus ([`systemd`]), etcd's unit
//! ([`unit`]), this member's URLs and tools ([`member`]), the node lock ([`lock`]), the advisory table ([`advisory`]), and output
//! ([`output`], [`printable`]).

pub mod advisory;
pub mod config;
pub mod lock;
pub mod member;
pub mod output;
pub mod printable;
pub mod report;
pub mod systemd;
pub mod unit;
