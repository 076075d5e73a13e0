//! A run of bytes told by its length and SHA-256: what etcd's snapshot trailer vouches
//! for (`member/tools.rs`), what a backup's upload streams and its read-back returns
//! (`backup/s3.rs`), compared across them. A value of its own, below the parts that
//! compare it.

/// Bytes as counted and hashed: their length and SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Digest256 {
    /// Bytes.
    pub len: u64,
    /// SHA-256 of them.
    pub sha256: [u8; 32],
}
