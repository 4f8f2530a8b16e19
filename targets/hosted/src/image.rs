//! The program's static data, and the same variable in another process of the job.
//!
//! The Cheetah core hands raw remote addresses around (seed: "a pointer valid in
//! the remote context"). On the systems it ran on, every context of a job ran one
//! executable loaded at one address, so the address of a static variable (`static
//! double a[N]`, a global bell) named that variable in every context, and programs
//! put into `&a` of a peer. Linux now loads each process at a random address, which
//! breaks that. An [`Image`] says where this process's executable keeps its
//! writable static data (`.data`, `.bss`) and which executable it is; with the
//! peer's, [`translate`] turns an address inside our static data into the address
//! of the same byte in the peer's, as the seed's programs expect. Every other
//! address (heap, stack, `mmap`, one the peer sent us) passes unchanged.

use std::ffi::{c_int, c_void};

/// `PT_LOAD`, `PT_NOTE`, `PF_W` and `NT_GNU_BUILD_ID` (ELF, System V ABI).
const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const PF_W: u32 = 2;
const NT_GNU_BUILD_ID: u32 = 3;

/// Where an executable's writable static data lies in one process, and a digest
/// of the executable (its segments' layout and its build id), equal in every
/// process that runs the same file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Image {
    /// First byte of the writable segments.
    pub lo: u64,
    /// One past the last.
    pub hi: u64,
    /// The executable's digest.
    pub digest: u64,
}

/// Bytes of an [`Image`] on the wire: `lo`, `hi`, `digest`, little-endian.
pub const IMAGE_BYTES: usize = 24;

impl Image {
    /// The image as [`IMAGE_BYTES`] bytes.
    pub fn to_bytes(&self) -> [u8; IMAGE_BYTES] {
        let mut b = [0u8; IMAGE_BYTES];
        b[..8].copy_from_slice(&self.lo.to_le_bytes());
        b[8..16].copy_from_slice(&self.hi.to_le_bytes());
        b[16..].copy_from_slice(&self.digest.to_le_bytes());
        b
    }

    /// An image from [`Image::to_bytes`]; `None` for anything else (a wrong
    /// length, an empty or reversed range).
    pub fn from_bytes(b: &[u8]) -> Option<Image> {
        let b: &[u8; IMAGE_BYTES] = b.try_into().ok()?;
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let img = Image {
            lo: word(0),
            hi: word(8),
            digest: word(16),
        };
        (img.lo < img.hi).then_some(img)
    }

    /// Whether `addr` lies in the static data.
    pub fn holds(&self, addr: u64) -> bool {
        (self.lo..self.hi).contains(&addr)
    }
}

/// FNV-1a over `bytes`, continuing from `h`: a digest to tell executables apart
/// among the job's own processes (not a defence: they share the job's key).
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// This process's executable: its writable static data and digest. `None` where
/// the loader does not tell (no program headers, no writable segment).
pub fn own() -> Option<Image> {
    unsafe extern "C" fn first(info: *mut libc::dl_phdr_info, _: usize, out: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` for this call, and `out`
        // is the `Option<Image>` `own` passed in.
        let (info, out) = unsafe { (&*info, &mut *(out as *mut Option<Image>)) };
        if info.dlpi_phdr.is_null() {
            return 1;
        }
        // SAFETY: `dlpi_phnum` program headers lie at `dlpi_phdr`.
        let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum.into()) };
        let bias = info.dlpi_addr;
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut digest = 0xcbf2_9ce4_8422_2325;
        for p in phdrs {
            if p.p_type == PT_LOAD {
                for w in [
                    p.p_flags.into(),
                    p.p_offset,
                    p.p_vaddr,
                    p.p_filesz,
                    p.p_memsz,
                ] {
                    digest = fnv(digest, &u64::to_le_bytes(w));
                }
                // (Wrapping: nothing may panic in a callback from C.)
                let at = bias.wrapping_add(p.p_vaddr);
                if p.p_flags & PF_W != 0 && p.p_memsz > 0 {
                    lo = lo.min(at);
                    hi = hi.max(at.wrapping_add(p.p_memsz));
                }
            } else if p.p_type == PT_NOTE {
                // SAFETY: a loaded note segment: `p_memsz` readable bytes at its
                // address (the loader mapped it with the program).
                let notes = unsafe {
                    std::slice::from_raw_parts(
                        bias.wrapping_add(p.p_vaddr) as *const u8,
                        p.p_memsz as usize,
                    )
                };
                if let Some(id) = build_id(notes) {
                    digest = fnv(digest, id);
                }
            }
        }
        *out = (lo < hi).then_some(Image { lo, hi, digest });
        // The first object is the program itself: stop there.
        1
    }
    let mut out: Option<Image> = None;
    // SAFETY: `first` matches the callback type and only writes `out`, which
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut out as *mut Option<Image> as *mut c_void) };
    out
}

/// The GNU build id in a note segment, if it holds one.
fn build_id(mut notes: &[u8]) -> Option<&[u8]> {
    let align = |n: usize| n.div_ceil(4) * 4;
    while notes.len() >= 12 {
        let word = |i: usize| u32::from_ne_bytes(notes[i..i + 4].try_into().unwrap_or_default());
        let (namesz, descsz, kind) = (word(0) as usize, word(4) as usize, word(8));
        let desc_at = 12 + align(namesz);
        let end = desc_at.checked_add(align(descsz))?;
        let name = notes.get(12..12 + namesz)?;
        let desc = notes.get(desc_at..desc_at + descsz)?;
        if kind == NT_GNU_BUILD_ID && name == b"GNU\0" {
            return Some(desc);
        }
        notes = notes.get(end..)?;
    }
    None
}

/// Why an address could not be placed in a peer's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ambiguous {
    /// It lies in our static data and in the peer's, which start at different
    /// addresses: it could be our variable or one the peer told us of.
    BothImages,
}

/// Where `addr`, an address a program gave for the peer whose executable is
/// `theirs`, lies in the peer: inside our static data (`mine`) and the peer runs
/// the same executable, the same byte of the peer's static data; anything else as
/// given. Where our static data and the peer's overlap at different addresses
/// (rare: the loader would have had to put them within their size of each other),
/// an address in both is [`Ambiguous`].
pub fn translate(addr: u64, mine: &Image, theirs: &Image) -> Result<u64, Ambiguous> {
    if !mine.holds(addr) || theirs.digest != mine.digest || theirs.lo == mine.lo {
        return Ok(addr);
    }
    if theirs.holds(addr) {
        return Err(Ambiguous::BothImages);
    }
    Ok(addr - mine.lo + theirs.lo)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::atomic::AtomicU64;

    /// Writable static data (an atomic is never placed in read-only memory).
    static COUNTER: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

    #[test]
    fn our_static_data_is_in_our_image() {
        let img = own().expect("the test program has writable static data");
        let at = COUNTER.as_ptr() as u64;
        assert!(img.holds(at) && img.holds(at + 31), "{img:x?} {at:#x}");
        let heap = Box::new(0u64);
        assert!(!img.holds(&*heap as *const u64 as u64));
        let local = 0u64;
        assert!(!img.holds(&local as *const u64 as u64));
        assert_eq!(own(), Some(img), "the same every time");
        assert_eq!(Image::from_bytes(&img.to_bytes()), Some(img));
        assert_eq!(Image::from_bytes(&img.to_bytes()[..23]), None);
        let backwards = Image {
            lo: 8,
            hi: 8,
            digest: 1,
        };
        assert_eq!(Image::from_bytes(&backwards.to_bytes()), None);
    }

    #[test]
    fn a_static_address_names_the_same_byte_in_a_peer() {
        let mine = Image {
            lo: 0x5000_0000,
            hi: 0x5001_0000,
            digest: 7,
        };
        let theirs = Image {
            lo: 0x7000_0000,
            hi: 0x7001_0000,
            digest: 7,
        };
        // Ours, first and last byte: the peer's same byte.
        assert_eq!(translate(0x5000_0000, &mine, &theirs), Ok(0x7000_0000));
        assert_eq!(translate(0x5000_ffff, &mine, &theirs), Ok(0x7000_ffff));
        // Not ours (heap, stack, the peer's own address it sent us): unchanged.
        for a in [0, 0x4fff_ffff, 0x5001_0000, 0x7000_0010, u64::MAX] {
            assert_eq!(translate(a, &mine, &theirs), Ok(a), "{a:#x}");
        }
        // Another executable, or the same one at the same address: unchanged.
        let other = Image {
            digest: 8,
            ..theirs
        };
        assert_eq!(translate(0x5000_0010, &mine, &other), Ok(0x5000_0010));
        assert_eq!(translate(0x5000_0010, &mine, &mine), Ok(0x5000_0010));
        // Overlapping at different addresses: only the shared part is ambiguous.
        let near = Image {
            lo: 0x5000_8000,
            hi: 0x5001_8000,
            digest: 7,
        };
        assert_eq!(translate(0x5000_0010, &mine, &near), Ok(0x5000_8010));
        assert_eq!(
            translate(0x5000_8010, &mine, &near),
            Err(Ambiguous::BothImages)
        );
    }

    #[test]
    fn build_ids_are_found_in_notes_and_bad_notes_end_the_search() {
        let mut notes = Vec::new();
        // An ABI tag note (name "GNU", 16 bytes), then the build id.
        for (kind, desc) in [(1u32, vec![0u8; 16]), (3, vec![0xab, 0xcd, 0xef])] {
            notes.extend_from_slice(&4u32.to_ne_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
            notes.extend_from_slice(&kind.to_ne_bytes());
            notes.extend_from_slice(b"GNU\0");
            notes.extend_from_slice(&desc);
            notes.resize(notes.len().div_ceil(4) * 4, 0);
        }
        assert_eq!(build_id(&notes), Some(&[0xab, 0xcd, 0xef][..]));
        assert_eq!(build_id(&notes[..20]), None, "cut short");
        let mut huge = notes.clone();
        huge[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(build_id(&huge), None, "a length past the end");
        assert_eq!(build_id(&[]), None);
    }
}
