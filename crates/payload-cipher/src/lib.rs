//! ChaCha20-Poly1305 over one chunk of an age payload, for etcd-setup's backups.
//!
//! Why a crate of its own: the cipher's code is generic, and Rust compiles generic code
//! in the crate that instantiates it, at that crate's opt-level. Instantiated in
//! etcd-setup (opt-level "s", for the static binary's size) sealing a 122 MiB snapshot
//! took about 0.33 s of cipher work, over twice the stock age for the same bytes; a per-package
//! opt-level for `chacha20` and `poly1305` changes nothing, as their code is compiled in
//! etcd-setup. Here the instantiation lives in this crate, which etcd-setup's Cargo.toml
//! compiles at opt-level 3, behind two functions that are not generic.

#![forbid(unsafe_code)]

use chacha20poly1305::aead::AeadInPlace;
use chacha20poly1305::{ChaCha20Poly1305, KeyInit, Tag};

/// The payload key of one age file.
pub struct PayloadCipher(ChaCha20Poly1305);

/// A chunk's tag did not match: damaged, truncated, or sealed with another key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forged;

impl PayloadCipher {
    /// The cipher of `key`.
    pub fn new(key: &[u8; 32]) -> Self {
        PayloadCipher(ChaCha20Poly1305::new(key.into()))
    }

    /// Encrypts `chunk` in place under `nonce` (no associated data); its tag.
    #[inline(never)]
    pub fn seal(&self, nonce: &[u8; 12], chunk: &mut [u8]) -> [u8; 16] {
        self.0
            .encrypt_in_place_detached(nonce.into(), b"", chunk)
            // Only a chunk over the cipher's 256 GiB limit is refused; age's are 64 KiB.
            .expect("an age chunk is far below ChaCha20-Poly1305's length limit")
            .into()
    }

    /// Decrypts `chunk` in place under `nonce` when `tag` authenticates it; on
    /// [`Forged`] `chunk` is left as it was.
    #[inline(never)]
    pub fn open(&self, nonce: &[u8; 12], chunk: &mut [u8], tag: &[u8; 16]) -> Result<(), Forged> {
        self.0
            .decrypt_in_place_detached(nonce.into(), b"", chunk, Tag::from_slice(tag))
            .map_err(|_| Forged)
    }
}
