//! ELF header checks: is this file an executable this machine can run?
//!
//! Only the 20 first bytes of the header are needed (identification, type and machine), so
//! the archive pass checks `etcd` and `etcdctl` from the bytes as they stream by, without
//! reading the files back.

use std::fmt;

/// How many leading bytes of a file [`check`] needs.
pub const HEADER_LEN: usize = 20;

const EI_CLASS: usize = 4;
const EI_DATA: usize = 5;
const EI_VERSION: usize = 6;
const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const ELFDATA2MSB: u8 = 2;
const ET_EXEC: u16 = 2;
const ET_DYN: u16 = 3;

/// A machine etcd is released for, named as ELF describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Machine {
    /// x86-64 (`amd64`): 64-bit, little-endian, `EM_X86_64`.
    X86_64,
    /// AArch64 (`arm64`): 64-bit, little-endian, `EM_AARCH64`.
    Aarch64,
    /// POWER little-endian (`ppc64le`): 64-bit, little-endian, `EM_PPC64`.
    Ppc64le,
    /// IBM Z (`s390x`): 64-bit, big-endian, `EM_S390`.
    S390x,
}

impl Machine {
    /// Every machine, for name look-ups.
    pub const ALL: &'static [Machine] = &[
        Machine::X86_64,
        Machine::Aarch64,
        Machine::Ppc64le,
        Machine::S390x,
    ];

    /// The machine this program was built for (x86-64 or AArch64 for the node images); any
    /// other host is treated as x86-64.
    pub const fn host() -> Machine {
        if cfg!(target_arch = "aarch64") {
            Machine::Aarch64
        } else if cfg!(all(target_arch = "powerpc64", target_endian = "little")) {
            Machine::Ppc64le
        } else if cfg!(target_arch = "s390x") {
            Machine::S390x
        } else {
            Machine::X86_64
        }
    }

    /// The architecture as etcd's release names spell it (Go's `GOARCH`), e.g. `amd64`.
    pub fn goarch(self) -> &'static str {
        match self {
            Machine::X86_64 => "amd64",
            Machine::Aarch64 => "arm64",
            Machine::Ppc64le => "ppc64le",
            Machine::S390x => "s390x",
        }
    }

    /// The machine a release name's architecture denotes, e.g. `arm64` → AArch64.
    pub fn from_goarch(goarch: &str) -> Option<Machine> {
        Machine::ALL.iter().copied().find(|m| m.goarch() == goarch)
    }

    fn e_machine(self) -> u16 {
        match self {
            Machine::X86_64 => 62,
            Machine::Aarch64 => 183,
            Machine::Ppc64le => 21,
            Machine::S390x => 22,
        }
    }

    fn data(self) -> u8 {
        match self {
            Machine::S390x => ELFDATA2MSB,
            _ => ELFDATA2LSB,
        }
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(machine_name(self.e_machine()))
    }
}

/// Why a file is not an executable for the expected machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElfError {
    /// The file is shorter than an ELF header.
    TooShort(usize),
    /// The file does not start with the ELF magic bytes.
    NotElf,
    /// An ELF file, but not an executable or a position-independent executable.
    NotExecutable(u16),
    /// An ELF file with an unknown header version or byte order.
    Malformed,
    /// An ELF executable for another class, byte order or machine.
    Foreign {
        /// What the file was built for, e.g. `aarch64, 64-bit, little-endian`.
        found: String,
        /// What this machine runs.
        expected: Machine,
    },
}

impl ElfError {
    /// True when the file is a well-formed executable, only for another machine: the
    /// operator needs another release rather than an intact one.
    pub fn is_wrong_architecture(&self) -> bool {
        matches!(self, ElfError::Foreign { .. })
    }
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ElfError::TooShort(n) => write!(f, "is not an ELF executable (only {n} bytes long)"),
            ElfError::NotElf => f.write_str("is not an ELF executable (no ELF magic bytes)"),
            ElfError::NotExecutable(t) => {
                write!(f, "is an ELF file of type {t}, not an executable")
            }
            ElfError::Malformed => f.write_str("has a malformed ELF header"),
            ElfError::Foreign { found, expected } => write!(
                f,
                "is an executable for {found}; this machine runs {expected}, 64-bit, {}",
                if expected.data() == ELFDATA2LSB {
                    "little-endian"
                } else {
                    "big-endian"
                }
            ),
        }
    }
}

impl std::error::Error for ElfError {}

/// Checks that `header` (a file's first bytes, at least [`HEADER_LEN`]) starts an ELF
/// executable (`ET_EXEC` or `ET_DYN`) that `expected` can run: 64-bit class, its byte order,
/// its `e_machine`.
pub fn check(header: &[u8], expected: Machine) -> Result<(), ElfError> {
    let Some(h) = header.get(..HEADER_LEN) else {
        return Err(ElfError::TooShort(header.len()));
    };
    if h[..4] != *b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    let (class, data) = (h[EI_CLASS], h[EI_DATA]);
    let read16 = |at: usize| {
        let b = [h[at], h[at + 1]];
        match data {
            ELFDATA2LSB => Some(u16::from_le_bytes(b)),
            ELFDATA2MSB => Some(u16::from_be_bytes(b)),
            _ => None,
        }
    };
    let (Some(e_type), Some(e_machine)) = (read16(16), read16(18)) else {
        return Err(ElfError::Malformed);
    };
    if h[EI_VERSION] != 1 {
        return Err(ElfError::Malformed);
    }
    if e_type != ET_EXEC && e_type != ET_DYN {
        return Err(ElfError::NotExecutable(e_type));
    }
    if class != ELFCLASS64 || data != expected.data() || e_machine != expected.e_machine() {
        let found = format!(
            "{}, {}, {}",
            machine_name(e_machine),
            if class == ELFCLASS64 {
                "64-bit"
            } else {
                "32-bit"
            },
            if data == ELFDATA2LSB {
                "little-endian"
            } else {
                "big-endian"
            }
        );
        return Err(ElfError::Foreign { found, expected });
    }
    Ok(())
}

/// Whether a whole 64-bit ELF file is statically linked: no program header asks for a
/// program interpreter (`PT_INTERP`, the dynamic loader). A static PIE counts as static.
pub fn is_static(file: &[u8]) -> Result<bool, ElfError> {
    const PT_INTERP: u32 = 3;
    if file.len() < 64 {
        return Err(ElfError::TooShort(file.len()));
    }
    if file[..4] != *b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    if file[EI_CLASS] != ELFCLASS64 {
        return Err(ElfError::Malformed);
    }
    let big = match file[EI_DATA] {
        ELFDATA2LSB => false,
        ELFDATA2MSB => true,
        _ => return Err(ElfError::Malformed),
    };
    let read = |at: usize, len: usize| -> Result<u64, ElfError> {
        let bytes = file.get(at..at + len).ok_or(ElfError::Malformed)?;
        Ok(bytes.iter().enumerate().fold(0u64, |acc, (i, b)| {
            let shift = if big { (len - 1 - i) * 8 } else { i * 8 };
            acc | u64::from(*b) << shift
        }))
    };
    let phoff = usize::try_from(read(32, 8)?).map_err(|_| ElfError::Malformed)?;
    let phentsize = read(54, 2)? as usize;
    let phnum = read(56, 2)? as usize;
    if phentsize < 4 {
        return Err(ElfError::Malformed);
    }
    for i in 0..phnum {
        let at = phoff
            .checked_add(i * phentsize)
            .ok_or(ElfError::Malformed)?;
        if read(at, 4)? == u64::from(PT_INTERP) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A readable name for an `e_machine` value.
fn machine_name(e_machine: u16) -> &'static str {
    match e_machine {
        3 => "x86",
        8 => "mips",
        20 => "ppc",
        21 => "ppc64",
        22 => "s390",
        40 => "arm",
        62 => "x86-64",
        183 => "aarch64",
        243 => "riscv",
        _ => "an unknown machine",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF header prefix: identification, type and machine.
    fn header(class: u8, data: u8, e_type: u16, e_machine: u16) -> Vec<u8> {
        let mut h = vec![0x7f, b'E', b'L', b'F', class, data, 1, 0];
        h.resize(16, 0);
        let (t, m) = if data == ELFDATA2MSB {
            (e_type.to_be_bytes(), e_machine.to_be_bytes())
        } else {
            (e_type.to_le_bytes(), e_machine.to_le_bytes())
        };
        h.extend_from_slice(&t);
        h.extend_from_slice(&m);
        h.resize(64, 0);
        h
    }

    #[test]
    fn accepts_executables_and_pies_for_the_expected_machine() {
        for t in [ET_EXEC, ET_DYN] {
            assert_eq!(check(&header(2, 1, t, 62), Machine::X86_64), Ok(()));
            assert_eq!(check(&header(2, 1, t, 183), Machine::Aarch64), Ok(()));
            assert_eq!(check(&header(2, 2, t, 22), Machine::S390x), Ok(()));
        }
    }

    #[test]
    fn rejects_other_machines_classes_and_byte_orders_as_wrong_architecture() {
        for h in [
            header(2, 1, ET_EXEC, 183),
            header(1, 1, ET_EXEC, 62),
            header(2, 2, ET_EXEC, 62),
        ] {
            let err = check(&h, Machine::X86_64).unwrap_err();
            assert!(err.is_wrong_architecture(), "{err}");
        }
        let err = check(&header(2, 1, ET_EXEC, 183), Machine::X86_64).unwrap_err();
        assert_eq!(
            err.to_string(),
            "is an executable for aarch64, 64-bit, little-endian; \
             this machine runs x86-64, 64-bit, little-endian"
        );
    }

    #[test]
    fn an_x86_64_executable_is_the_wrong_architecture_on_aarch64() {
        let err = check(&header(2, 1, ET_EXEC, 62), Machine::Aarch64).unwrap_err();
        assert!(err.is_wrong_architecture(), "{err}");
        assert_eq!(
            err.to_string(),
            "is an executable for x86-64, 64-bit, little-endian; \
             this machine runs aarch64, 64-bit, little-endian"
        );
    }

    #[test]
    fn rejects_non_executables_and_non_elf_files() {
        let cases = [
            (b"#!/bin/sh\necho etcd\n".to_vec(), ElfError::NotElf),
            (b"\x7fELF".to_vec(), ElfError::TooShort(4)),
            (header(2, 1, 1, 62), ElfError::NotExecutable(1)),
            (header(2, 3, ET_EXEC, 62), ElfError::Malformed),
        ];
        for (bytes, want) in cases {
            let err = check(&bytes, Machine::X86_64).unwrap_err();
            assert!(!err.is_wrong_architecture());
            assert_eq!(err, want);
        }
    }

    #[test]
    fn a_program_interpreter_makes_a_file_dynamic() {
        // One program header (56 bytes) at offset 64, of type `ty`.
        let file = |ty: u32| {
            let mut f = header(2, 1, ET_DYN, 62);
            f[32..40].copy_from_slice(&64u64.to_le_bytes());
            f[54..56].copy_from_slice(&56u16.to_le_bytes());
            f[56..58].copy_from_slice(&1u16.to_le_bytes());
            f.extend_from_slice(&ty.to_le_bytes());
            f.resize(64 + 56, 0);
            f
        };
        assert_eq!(is_static(&file(1)), Ok(true));
        assert_eq!(is_static(&file(3)), Ok(false));
        let mut cut = file(1);
        cut.truncate(66);
        assert_eq!(is_static(&cut), Err(ElfError::Malformed));
        assert_eq!(is_static(b"#!/bin/sh\n"), Err(ElfError::TooShort(10)));
    }

    #[test]
    fn goarch_names_round_trip() {
        for m in Machine::ALL {
            assert_eq!(Machine::from_goarch(m.goarch()), Some(*m));
        }
        assert_eq!(Machine::from_goarch("mips64le"), None);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(Machine::host(), Machine::X86_64);
        }
    }
}
