//! The memory-mapped `TPACKET_V2` receive and transmit rings.

use super::*;

/// The two rings, mapped.
#[derive(Debug)]
pub(super) struct Rings {
    pub(super) base: *mut u8,
    pub(super) len: usize,
    pub(super) frame: usize,
    pub(super) rx_frames: usize,
    pub(super) tx_frames: usize,
}

impl Rings {
    pub(super) fn rx_slot(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.rx_frames);
        // SAFETY: inside the mapping (receive ring first, `rx_frames` slots).
        unsafe { self.base.add(i * self.frame) }
    }

    pub(super) fn tx_slot(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.tx_frames);
        // SAFETY: inside the mapping (transmit ring after the receive ring).
        unsafe { self.base.add((self.rx_frames + i) * self.frame) }
    }

    /// The status word at the start of `slot` (one of this mapping's), shared with
    /// the kernel.
    pub(super) fn status(&self, slot: *mut u8) -> &AtomicU32 {
        // SAFETY: every slot starts with the 4-byte-aligned `tp_status` of a
        // tpacket2_hdr, which the kernel and this process hand each other; the mapping
        // lives as long as `self`.
        unsafe { &*(slot as *const AtomicU32) }
    }
}

impl Drop for Rings {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `EthDevice::open`, unmapped once.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

pub(super) fn setup_ring(
    fd: &OwnedFd,
    opt: libc::c_int,
    frame: usize,
    bytes: usize,
) -> Result<usize, HostError> {
    // `frame` is a power of two, so blocks hold whole frames and the slots of a
    // ring are evenly spaced in the mapping.
    let block = BLOCK.max(frame);
    let blocks = (bytes.max(MIN_SLOTS * frame) / block).max(1);
    let req = libc::tpacket_req {
        tp_block_size: block as u32,
        tp_block_nr: blocks as u32,
        tp_frame_size: frame as u32,
        tp_frame_nr: (blocks * (block / frame)) as u32,
    };
    // SAFETY: a valid socket and a tpacket_req of the right size.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            opt,
            &req as *const libc::tpacket_req as *const libc::c_void,
            std::mem::size_of::<libc::tpacket_req>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(HostError::Fabric(format!(
            "eth: cannot set up the packet ring: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(req.tp_frame_nr as usize)
}
