//! Bounds-checked access to a shared memory region.
//!
//! Every offset used by the NIC model comes from arithmetic on values read from the
//! region itself, which another process may have scribbled on. All access goes through
//! here and is checked against the region's length and alignment first, so a corrupt
//! region produces [`MyriError::OutOfBounds`], never an out-of-bounds access. The
//! one exception is the data path's ring access (the `*_unchecked` accessors), whose
//! offsets come only from the NIC's own copy of a geometry checked against the
//! region once, when it attached, and never from the region's contents.

use core::sync::atomic::{AtomicU32, AtomicU64};

use crate::MyriError;

/// A shared memory region: a `/dev/shm` mapping, an `ivshmem` BAR.
#[derive(Debug)]
pub struct Region {
    base: *mut u8,
    len: usize,
    /// The host's hook that raises a peer's interrupt
    /// ([`crate::NicConfig::interrupt`]), kept here for the transmit tokens that
    /// borrow the region.
    pub(crate) interrupt: Option<fn(&AtomicU32)>,
}

// SAFETY: the region is plain memory shared by design; every access below is either
// atomic or to bytes owned, by the ring protocol, by the side touching them.
unsafe impl Send for Region {}

impl Region {
    /// Wraps `len` bytes at `base`.
    ///
    /// # Safety
    ///
    /// `base..base + len` must be valid for reads and writes for as long as the
    /// `Region` (and everything built on it) lives, and must not be used by this
    /// process through any other Rust reference meanwhile. Other processes may map
    /// the same memory: they are expected to follow the ring protocol, and if they do
    /// not, the bytes read may be garbage but every access stays inside the region.
    pub unsafe fn new(base: *mut u8, len: usize) -> Result<Region, MyriError> {
        if base.is_null() || !(base as usize).is_multiple_of(64) {
            return Err(MyriError::Misaligned);
        }
        Ok(Region {
            base,
            len,
            interrupt: None,
        })
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, off: usize, len: usize, align: usize) -> Result<(), MyriError> {
        let end = off.checked_add(len).ok_or(MyriError::OutOfBounds)?;
        if end > self.len {
            return Err(MyriError::OutOfBounds);
        }
        if !off.is_multiple_of(align) {
            return Err(MyriError::Misaligned);
        }
        Ok(())
    }

    /// The 64-bit atomic at `off`.
    pub fn u64_at(&self, off: usize) -> Result<&AtomicU64, MyriError> {
        self.check(off, 8, 8)?;
        // SAFETY: in bounds and 8-aligned (checked above; base is 64-aligned); the
        // region outlives `&self`; shared mutation goes through the atomic.
        Ok(unsafe { &*(self.base.add(off) as *const AtomicU64) })
    }

    /// The 32-bit atomic at `off`.
    pub fn u32_at(&self, off: usize) -> Result<&AtomicU32, MyriError> {
        self.check(off, 4, 4)?;
        // SAFETY: as in `u64_at`, with 4-byte size and alignment.
        Ok(unsafe { &*(self.base.add(off) as *const AtomicU32) })
    }

    /// [`Region::u64_at`] without the check, for an offset proven in bounds once:
    /// a ring word or slot of a geometry checked against this region when the NIC
    /// attached (see `MyriNic`'s ring access), on the path every frame takes.
    ///
    /// # Safety
    ///
    /// `off + 8 <= self.len()`, and `off` is a multiple of 8.
    #[inline]
    pub(crate) unsafe fn u64_unchecked(&self, off: usize) -> &AtomicU64 {
        debug_assert!(self.check(off, 8, 8).is_ok());
        // SAFETY: in bounds and 8-aligned (the caller's contract; base is 64-aligned);
        // the region outlives `&self`; shared mutation goes through the atomic.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// [`Region::u32_at`] without the check, as [`Region::u64_unchecked`].
    ///
    /// # Safety
    ///
    /// `off + 4 <= self.len()`, and `off` is a multiple of 4.
    #[inline]
    pub(crate) unsafe fn u32_unchecked(&self, off: usize) -> &AtomicU32 {
        debug_assert!(self.check(off, 4, 4).is_ok());
        // SAFETY: as in `u64_unchecked`, with 4-byte size and alignment.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    /// [`Region::bytes`] without the check, as [`Region::u64_unchecked`].
    ///
    /// # Safety
    ///
    /// `off + len <= self.len()`, and the ring protocol gives the caller these
    /// bytes to read (as [`Region::bytes`] says).
    #[inline]
    pub(crate) unsafe fn bytes_unchecked(&self, off: usize, len: usize) -> &[u8] {
        debug_assert!(self.check(off, len, 1).is_ok());
        // SAFETY: in bounds (the caller's contract); not written by the producer while
        // the consumer owns them (ring protocol); bytes have no invalid values.
        unsafe { core::slice::from_raw_parts(self.base.add(off), len) }
    }

    /// [`Region::bytes_mut`] without the check, as [`Region::u64_unchecked`].
    ///
    /// # Safety
    ///
    /// `off + len <= self.len()`, and what [`Region::bytes_mut`] asks: the caller
    /// owns these bytes exclusively under the ring protocol and makes no two
    /// overlapping slices.
    #[allow(clippy::mut_from_ref)]
    #[inline]
    pub(crate) unsafe fn bytes_mut_unchecked(&self, off: usize, len: usize) -> &mut [u8] {
        debug_assert!(self.check(off, len, 1).is_ok());
        // SAFETY: in bounds; exclusivity is the caller's contract above.
        unsafe { core::slice::from_raw_parts_mut(self.base.add(off), len) }
    }

    /// `len` bytes at `off`, read-only.
    ///
    /// The ring protocol gives the caller ownership of these bytes (a slot between
    /// the producer's release of `tail` and the consumer's release of `head`).
    pub(crate) fn bytes(&self, off: usize, len: usize) -> Result<&[u8], MyriError> {
        self.check(off, len, 1)?;
        // SAFETY: in bounds; the slot is not written by its producer while the
        // consumer owns it (ring protocol); bytes have no invalid values.
        Ok(unsafe { core::slice::from_raw_parts(self.base.add(off), len) })
    }

    /// `len` bytes at `off`, writable.
    ///
    /// # Safety
    ///
    /// The caller must own these bytes exclusively under the ring protocol (a free
    /// slot of a ring it produces into) and must not create two overlapping slices.
    // Shared memory is written through `&self` by design: exclusivity comes from the
    // ring protocol, which the `# Safety` contract hands to the caller.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn bytes_mut(&self, off: usize, len: usize) -> Result<&mut [u8], MyriError> {
        self.check(off, len, 1)?;
        // SAFETY: in bounds; exclusivity is the caller's contract above.
        Ok(unsafe { core::slice::from_raw_parts_mut(self.base.add(off), len) })
    }

    /// Fills `len` bytes at `off` with zero.
    pub(crate) fn zero(&mut self, off: usize, len: usize) -> Result<(), MyriError> {
        self.check(off, len, 1)?;
        // SAFETY: in bounds; `&mut self` means no slice of ours is alive, and only
        // the creating node zeroes, before any peer may use the region.
        unsafe { core::ptr::write_bytes(self.base.add(off), 0, len) };
        Ok(())
    }
}
