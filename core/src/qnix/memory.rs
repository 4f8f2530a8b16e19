//! Program memory: data regions, the buffer pool and page tables, spare buffers,
//! and the gate through which peers reach only granted ranges.

use super::*;

/// Where a context's data is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Region {
    /// Not given yet (a C facade resolves the context region when the command is posted).
    #[default]
    None,
    /// The buffer pool, from this page on.
    Pool(usize),
    /// Memory segments `(address, length)` in order (a resolved page table).
    Segments(Vec<(u64, usize)>),
    /// Bytes copied into the context region.
    Data(Vec<u8>),
}

#[derive(Debug)]
pub(super) enum TxData {
    Owned(Vec<u8>),
    Segments(Vec<(u64, usize)>),
}

impl TxData {
    /// Copies the message's bytes from `off` into `out`; `false`, with `out`
    /// zeroed (the receiver still gets every byte it was told of), where program
    /// memory refused them.
    pub(super) fn read_into<M: Memory>(&self, mem: &mut M, off: usize, out: &mut [u8]) -> bool {
        let ok = match self {
            TxData::Owned(v) => match v.get(off..off + out.len()) {
                Some(b) => {
                    out.copy_from_slice(b);
                    true
                }
                None => false,
            },
            TxData::Segments(s) => read_at(mem, s, off, out).is_ok(),
        };
        if !ok {
            out.fill(0);
        }
        ok
    }
}

/// Buffers kept for reuse, so that a send or receive in the steady state
/// allocates nothing: destination lists, short messages' copies, resolved regions.
/// At most [`SPARES`] of each kind are kept, none over [`SHORT_MAX`] bytes.
#[derive(Debug, Default)]
pub(super) struct Spares {
    pub(super) nodes: Vec<Vec<NodeId>>,
    pub(super) bytes: Vec<Vec<u8>>,
    pub(super) segs: Vec<Vec<(u64, usize)>>,
}

/// Spare buffers kept of each kind: enough for the sends and receives one NIC
/// step finishes.
pub(super) const SPARES: usize = 64;

/// An empty buffer from `pool`, or a new one.
pub(super) fn take_spare<T>(pool: &mut Vec<Vec<T>>) -> Vec<T> {
    pool.pop().unwrap_or_default()
}

/// Keeps `v` (emptied) in `pool` if it has room and `v` holds memory, but not
/// more than a short message's worth (a long message's copy is given back).
pub(super) fn give_spare<T>(pool: &mut Vec<Vec<T>>, mut v: Vec<T>) {
    let bytes = v.capacity() * core::mem::size_of::<T>();
    if (1..=SHORT_MAX).contains(&bytes) && pool.len() < SPARES {
        v.clear();
        pool.push(v);
    }
}

impl Spares {
    pub(super) fn nodes(&mut self) -> Vec<NodeId> {
        take_spare(&mut self.nodes)
    }
    pub(super) fn bytes(&mut self) -> Vec<u8> {
        take_spare(&mut self.bytes)
    }
    pub(super) fn segs(&mut self) -> Vec<(u64, usize)> {
        take_spare(&mut self.segs)
    }
    pub(super) fn give_bytes(&mut self, v: Vec<u8>) {
        give_spare(&mut self.bytes, v)
    }
    pub(super) fn give_segs(&mut self, v: Vec<(u64, usize)>) {
        give_spare(&mut self.segs, v)
    }
    /// A context region's buffer (a short send's copy, a page table) is kept.
    pub(super) fn give_region(&mut self, r: Region) {
        match r {
            Region::Data(v) => self.give_bytes(v),
            Region::Segments(v) => self.give_segs(v),
            Region::None | Region::Pool(_) => {}
        }
    }
    pub(super) fn give_job(&mut self, job: TxJob) {
        give_spare(&mut self.nodes, job.dests);
        match job.data {
            TxData::Owned(b) => self.give_bytes(b),
            TxData::Segments(s) => self.give_segs(s),
        }
    }
}

/// Program memory as the engine sees it in a QNIX process: the process's own
/// operations reach all of it, peers only the ranges granted to rendezvous, and
/// the rendezvous bells are noted instead of rung.
pub(super) struct Gate<'m, M> {
    pub(super) mem: &'m mut M,
    pub(super) armed: &'m [Armed],
    pub(super) rung: &'m mut Vec<u64>,
}

impl<M: Memory> Memory for Gate<'_, M> {
    fn check(&mut self, addr: u64, len: u64, access: Access) -> Result<(), Error> {
        if untoken(addr).is_some() {
            // A peer may ring the bell of a receive granted to a rendezvous only.
            return match untoken(addr) {
                Some((RECV, c)) if access == Access::PeerWrite && len == 4 => {
                    if self.armed.iter().any(|a| a.ctx == c) {
                        Ok(())
                    } else {
                        Err(Error::BadAddress)
                    }
                }
                _ => Err(Error::BadAddress),
            };
        }
        match access {
            Access::PeerRead => Err(Error::BadAddress),
            Access::PeerWrite => {
                let inside = self.armed.iter().any(|a| {
                    addr >= a.addr
                        && addr
                            .checked_add(len)
                            .is_some_and(|end| end <= a.addr + a.len as u64)
                });
                if inside {
                    self.mem.check(addr, len, Access::Write)
                } else {
                    Err(Error::BadAddress)
                }
            }
            _ => self.mem.check(addr, len, access),
        }
    }
    fn write(&mut self, addr: u64, data: &[u8]) -> Result<(), Error> {
        self.mem.write(addr, data)
    }
    fn read(&mut self, addr: u64, out: &mut [u8]) -> Result<(), Error> {
        self.mem.read(addr, out)
    }
    fn ring(&mut self, bell: u64) {
        if untoken(bell).is_some() && self.rung.len() < 4 * CONTEXTS {
            self.rung.push(bell);
        }
    }
}

/// `segs` as one range, if they are adjacent.
pub(super) fn contiguous(segs: &[(u64, usize)]) -> Option<(u64, usize)> {
    let (&(first, _), _) = segs.split_first()?;
    let mut end = first;
    for &(a, n) in segs {
        if a != end {
            return None;
        }
        end = a.checked_add(n as u64)?;
    }
    Some((first, (end - first) as usize))
}

/// Writes `data` at byte `off` of the region made of `segs`.
pub(super) fn write_at<M: Memory>(
    mem: &mut M,
    segs: &[(u64, usize)],
    mut off: usize,
    mut data: &[u8],
) -> Result<(), Error> {
    for &(addr, len) in segs {
        if data.is_empty() {
            break;
        }
        if off >= len {
            off -= len;
            continue;
        }
        let n = (len - off).min(data.len());
        mem.write(addr + off as u64, &data[..n])?;
        data = &data[n..];
        off = 0;
    }
    if data.is_empty() {
        Ok(())
    } else {
        Err(Error::BadAddress)
    }
}

/// Reads `out.len()` bytes from byte `off` of the region made of `segs`.
pub(super) fn read_at<M: Memory>(
    mem: &mut M,
    segs: &[(u64, usize)],
    mut off: usize,
    mut out: &mut [u8],
) -> Result<(), Error> {
    for &(addr, len) in segs {
        if out.is_empty() {
            break;
        }
        if off >= len {
            off -= len;
            continue;
        }
        let n = (len - off).min(out.len());
        let (now, rest) = out.split_at_mut(n);
        mem.read(addr + off as u64, now)?;
        out = rest;
        off = 0;
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(Error::BadAddress)
    }
}

impl<'a, D: Device, C: Clock, M: Memory> Qnix<'a, D, C, M> {
    /// `qx_buffer_pool`: the buffer pool is `len` bytes of program memory at `base`
    /// (page-aligned, at most [`POOL_MAX`]); contexts name its pages by index.
    pub fn set_pool(&mut self, base: u64, len: usize) -> Result<(), QxError> {
        if self.pool.is_some() {
            return Err(QxError::Exists);
        }
        if len == 0 || len > POOL_MAX || !base.is_multiple_of(PAGE as u64) {
            return Err(QxError::Invalid);
        }
        self.mem.check(base, len as u64, Access::Write)?;
        self.pool = Some((base, len));
        Ok(())
    }

    /// The buffer pool, if any: (address, length).
    pub fn pool(&self) -> Option<(u64, usize)> {
        self.pool
    }

    /// The segments of `region` holding `len` bytes, checked for `access`.
    pub(super) fn resolve(
        &mut self,
        region: &Region,
        len: usize,
        access: Access,
    ) -> Result<Vec<(u64, usize)>, QxError> {
        let segs = match region {
            Region::None => return Err(QxError::Invalid),
            Region::Data(_) => return Err(QxError::Invalid),
            Region::Pool(page) => {
                let (base, size) = self.pool.ok_or(QxError::Invalid)?;
                let off = page.checked_mul(PAGE).ok_or(QxError::Invalid)?;
                if off.checked_add(len).is_none_or(|end| end > size) {
                    return Err(QxError::TooLong);
                }
                let mut out = self.spares.segs();
                out.push((base + off as u64, len));
                out
            }
            Region::Segments(s) => {
                let mut out = self.spares.segs();
                let mut left = len;
                for &(addr, n) in s {
                    if left == 0 {
                        break;
                    }
                    let n = n.min(left);
                    out.push((addr, n));
                    left -= n;
                }
                if left != 0 {
                    return Err(QxError::TooLong);
                }
                out
            }
        };
        for &(addr, n) in &segs {
            if n > 0 {
                self.mem
                    .check(addr, n as u64, access)
                    .map_err(|_| QxError::Fault)?;
            }
        }
        Ok(segs)
    }

    // ------------------------------------------------------------ contexts

    /// A [`Region::Data`] holding the `len` bytes at `addr` of this process's
    /// memory (a short send's data, copied when its command is posted), in a buffer
    /// kept from an earlier context: no allocation once warm.
    pub fn data_region(&mut self, addr: u64, len: usize) -> Result<Region, QxError> {
        if len > SHORT_MAX {
            return Err(QxError::TooLong);
        }
        let mut d = self.spares.bytes();
        d.resize(len, 0);
        if self.mem.read(addr, &mut d).is_err() {
            self.spares.give_bytes(d);
            return Err(QxError::Fault);
        }
        Ok(Region::Data(d))
    }

    /// A [`Region::Data`] holding a copy of `bytes` (a short send's data), in a
    /// buffer kept from an earlier context, as [`Qnix::data_region`] for data the
    /// program holds itself: no allocation once warm.
    pub fn short_data(&mut self, bytes: &[u8]) -> Result<Region, QxError> {
        if bytes.len() > SHORT_MAX {
            return Err(QxError::TooLong);
        }
        let mut d = self.spares.bytes();
        d.extend_from_slice(bytes);
        Ok(Region::Data(d))
    }
}
