//! Names as each tree spells them, and Rock Ridge link targets.

use super::*;

/// A plain ISO 9660 identifier as Linux shows it with `map=normal` (`isofs_name_translate`):
/// up to a NUL, lower case, a final `;1` or `.;1` removed, other `;` and `/` made `.`.
pub(super) fn iso_name(id: &[u8]) -> String {
    let len = id.len();
    let mut out = Vec::with_capacity(len);
    for (i, &c) in id.iter().enumerate() {
        if c == 0 {
            break;
        }
        let c = c.to_ascii_lowercase();
        if c == b'.' && i + 3 == len && id[i + 1] == b';' && id[i + 2] == b'1' {
            break;
        }
        if c == b';' && i + 2 == len && id[i + 1] == b'1' {
            break;
        }
        out.push(if c == b';' || c == b'/' { b'.' } else { c });
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Decodes UCS-2 big-endian (surrogate pairs accepted, an odd last byte dropped), up to a
/// NUL character.
pub(super) fn ucs2_be(bytes: &[u8]) -> String {
    let units = bytes
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .take_while(|&u| u != 0);
    char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// A Joliet identifier as Linux shows it (`get_joliet_filename`): a final `;1` removed,
/// then trailing dots (a name keeps its first character).
pub(super) fn joliet_name(id: &[u8]) -> String {
    let mut name = ucs2_be(id);
    if name.len() > 2 && name.ends_with(";1") {
        name.truncate(name.len() - 2);
    }
    while name.len() >= 2 && name.ends_with('.') {
        name.pop();
    }
    name
}

/// Whether a name in `naming`'s tree matches the wanted path component, as Linux's dentry
/// comparison does: Joliet ignores ASCII case and trailing dots (`check=relaxed` is its
/// default), the others compare exactly (`check=strict`).
pub(super) fn names_match(naming: Naming, have: &str, want: &str) -> bool {
    match naming {
        Naming::Joliet => have
            .trim_end_matches('.')
            .eq_ignore_ascii_case(want.trim_end_matches('.')),
        Naming::RockRidge | Naming::Iso9660 => have == want,
    }
}

/// Trims the space and NUL padding of a descriptor string field.
pub(super) fn trim_field(s: &str) -> String {
    s.trim_end_matches([' ', '\0']).trim_start().to_owned()
}

/// Appends the components of one `SL` entry's component area to `target` (RRIP §4.1.3.1).
/// `pending_slash` carries whether the last component ended without CONTINUE.
pub(super) fn append_link(target: &mut String, mut area: &[u8], pending_slash: &mut bool) {
    while let [flags, len, rest @ ..] = area {
        let len = usize::from(*len);
        let Some(content) = rest.get(..len) else {
            target.push('?');
            return;
        };
        if *pending_slash && !target.ends_with('/') {
            target.push('/');
        }
        match flags & !1 {
            0x02 => target.push('.'),
            0x04 => target.push_str(".."),
            0x08 => {
                target.clear();
                target.push('/');
            }
            _ => target.push_str(&String::from_utf8_lossy(content)),
        }
        *pending_slash = flags & 1 == 0;
        if target.len() > MAX_LINK_BYTES {
            target.truncate(MAX_LINK_BYTES);
            return;
        }
        area = &rest[len..];
    }
}

/// Reads a 32-bit little-endian value at `i` of `b`, when there.
pub(super) fn le32_at(b: &[u8], i: usize) -> Option<u32> {
    let bytes = b.get(i..i + 4)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}
