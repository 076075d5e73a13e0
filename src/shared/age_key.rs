//! An age recipient (`age1…`, an X25519 public key in Bech32) as the configuration reads
//! it (`[backup] recipients_file`, `shared/config/backup.rs`) and `backup/seal.rs`
//! encrypts to it: the one home of its spelling, below both.

use std::fmt;

/// Bech32's human-readable parts.
pub(crate) const RECIPIENT_HRP: &str = "age";
pub(crate) const IDENTITY_HRP: &str = "age-secret-key-";

/// A public key backups are encrypted to (`age1…`).
#[derive(Clone, PartialEq, Eq)]
pub struct Recipient {
    /// The X25519 public key.
    pub(crate) key: [u8; 32],
}

impl Recipient {
    /// Its `age1…` spelling.
    pub fn to_bech32(&self) -> String {
        bech32::encode(RECIPIENT_HRP, &self.key)
    }
}

impl fmt::Display for Recipient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_bech32())
    }
}

impl fmt::Debug for Recipient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Recipient({self})")
    }
}

impl std::str::FromStr for Recipient {
    type Err = String;

    /// Parses `age1…`; the error says what is wrong, without echoing the text (a secret
    /// key pasted by mistake is not repeated).
    fn from_str(s: &str) -> Result<Recipient, String> {
        // `get`, not an index: a non-ASCII text must not panic on a char boundary.
        if s.get(..IDENTITY_HRP.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(IDENTITY_HRP))
        {
            return Err(
                "is a secret key (AGE-SECRET-KEY-1…), not a recipient: write its public \
                        key (`age-keygen -y KEYFILE`) here, and keep the secret key off the node"
                    .into(),
            );
        }
        let (hrp, data) = bech32::decode(s).map_err(|e| format!("is no age recipient: {e}"))?;
        if hrp != RECIPIENT_HRP {
            return Err(format!(
                "is no X25519 age recipient (it starts `{hrp}1`, not `age1`; only X25519 \
                 recipients as age-keygen makes them are supported)"
            ));
        }
        let key: [u8; 32] = data.try_into().map_err(|d: Vec<u8>| {
            format!("is no age recipient: {} bytes of key, not 32", d.len())
        })?;
        Ok(Recipient { key })
    }
}

/// Bech32 (BIP 173, without its length limit, as age uses it).
pub(crate) mod bech32 {
    const CHARSET: &[u8; 32] = b"qpzry9x8gf2tvdw0s3jn54khce6mua7l";
    const GEN: [u32; 5] = [
        0x3b6a_57b2,
        0x2650_8e6d,
        0x1ea1_19fa,
        0x3d42_33dd,
        0x2a14_62b3,
    ];

    fn polymod(values: impl Iterator<Item = u8>) -> u32 {
        let mut chk = 1u32;
        for v in values {
            let top = chk >> 25;
            chk = (chk & 0x01ff_ffff) << 5 ^ u32::from(v);
            for (i, g) in GEN.iter().enumerate() {
                if (top >> i) & 1 == 1 {
                    chk ^= g;
                }
            }
        }
        chk
    }

    fn hrp_expand(hrp: &str) -> impl Iterator<Item = u8> + '_ {
        hrp.bytes()
            .map(|b| b >> 5)
            .chain(std::iter::once(0))
            .chain(hrp.bytes().map(|b| b & 31))
    }

    /// 8-bit bytes → 5-bit groups, padded.
    fn to_five(data: &[u8]) -> Vec<u8> {
        let (mut acc, mut bits, mut out) = (0u32, 0u32, Vec::new());
        for &b in data {
            acc = acc << 8 | u32::from(b);
            bits += 8;
            while bits >= 5 {
                bits -= 5;
                out.push((acc >> bits & 31) as u8);
            }
        }
        if bits > 0 {
            out.push((acc << (5 - bits) & 31) as u8);
        }
        out
    }

    pub fn encode(hrp: &str, data: &[u8]) -> String {
        let five = to_five(data);
        let chk = polymod(hrp_expand(hrp).chain(five.iter().copied()).chain([0u8; 6])) ^ 1;
        let mut s = format!("{hrp}1");
        s.extend(five.iter().map(|&v| CHARSET[v as usize] as char));
        s.extend((0..6).map(|i| CHARSET[(chk >> (5 * (5 - i)) & 31) as usize] as char));
        s
    }

    /// The (lowercase) human-readable part and the data of `s`; errors say what is
    /// wrong without repeating `s`.
    pub fn decode(s: &str) -> Result<(String, Vec<u8>), String> {
        if !s.is_ascii() {
            return Err("non-ASCII characters".into());
        }
        let lower = s.to_ascii_lowercase();
        if lower != s && s.to_ascii_uppercase() != s {
            return Err("mixed upper and lower case".into());
        }
        let sep = lower.rfind('1').ok_or("no separator `1`")?;
        let (hrp, rest) = (&lower[..sep], &lower.as_bytes()[sep + 1..]);
        if hrp.is_empty() || rest.len() < 6 {
            return Err("too short".into());
        }
        let five: Vec<u8> = rest
            .iter()
            .map(|c| CHARSET.iter().position(|x| x == c).map(|p| p as u8))
            .collect::<Option<_>>()
            .ok_or("a character outside bech32's alphabet")?;
        if polymod(hrp_expand(hrp).chain(five.iter().copied())) != 1 {
            return Err("its checksum does not match (a typo, or cut short)".into());
        }
        let five = &five[..five.len() - 6];
        let (mut acc, mut bits, mut out) = (0u32, 0u32, Vec::new());
        for &v in five {
            acc = (acc << 5 | u32::from(v)) & 0xfff;
            bits += 5;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        if bits >= 5 || acc & ((1 << bits) - 1) != 0 {
            return Err("bad padding".into());
        }
        Ok((hrp.to_string(), out))
    }
}
