//! NIC-resident services: fetch-and-add on counters in the owner's NIC memory, and
//! the combining-tree barrier.

use super::*;

impl MyriNic {
    /// Atomically adds `delta` to counter `counter` in `node`'s NIC memory and returns
    /// the previous value. No CPU of `node` takes part (LFC's NIC-resident
    /// `lfc_fetch_and_add`; counters start at 0).
    pub fn fetch_and_add(&self, node: u32, counter: usize, delta: u64) -> Result<u64, MyriError> {
        if node >= self.geo.nodes {
            return Err(MyriError::BadNode);
        }
        if counter >= COUNTERS {
            return Err(MyriError::OutOfBounds);
        }
        let c = self.region.u64_at(self.geo.nic(node) + 8 * counter)?;
        Ok(c.fetch_add(delta, Ordering::AcqRel))
    }

    pub(super) fn barrier_word(&self, node: u32, field: usize) -> Option<&AtomicU32> {
        if node >= self.geo.nodes {
            return None;
        }
        self.region
            .u32_at(self.geo.barrier_entry(node) + field)
            .ok()
    }

    /// Advances this node's next barrier among `n` members, this node at position
    /// `me`, position `i` being node `node(i)` (see the module documentation).
    /// `Ok(true)` once every member has arrived; the next call starts the next
    /// barrier. The count lives with the NIC, not with whoever calls, so engines
    /// that take turns on one NIC continue one sequence. A member list that does not
    /// put this node at `me`, or names a node outside the region, is `BadNode`.
    pub fn barrier_step(
        &mut self,
        me: u16,
        n: u16,
        node: impl Fn(u16) -> Option<u32>,
    ) -> Result<bool, MyriError> {
        let target = self.barriers.wrapping_add(1);
        // Wrapping comparison: a word is at most one barrier ahead of a reader.
        let reached = |w: &AtomicU32| (w.load(Ordering::Acquire).wrapping_sub(target) as i32) >= 0;
        let word = |p: u16, field: usize| {
            node(p)
                .and_then(|a| self.barrier_word(a, field))
                .ok_or(MyriError::BadNode)
        };
        if me >= n || node(me) != Some(self.me) {
            return Err(MyriError::BadNode);
        }
        let arrived = word(me, off::BARRIER_ARRIVED)?;
        let mut wrote = false;
        let done = if reached(arrived) {
            reached(word(0, off::BARRIER_RELEASED)?)
        } else {
            let first = me as u32 * BARRIER_FANIN as u32 + 1;
            for c in first..(first + BARRIER_FANIN as u32).min(n as u32) {
                if !reached(word(c as u16, off::BARRIER_ARRIVED)?) {
                    return Ok(false);
                }
            }
            // The subtree is in: its arrival happens-before the parent's acquire.
            arrived.store(target, Ordering::Release);
            wrote = true;
            if me == 0 {
                word(0, off::BARRIER_RELEASED)?.store(target, Ordering::Release);
            }
            me == 0 || reached(word(0, off::BARRIER_RELEASED)?)
        };
        if wrote {
            self.stats.barrier_arrivals += 1;
            if me == 0 {
                self.stats.barrier_releases += 1;
            }
        }
        if done {
            self.barriers = target;
        }
        Ok(done)
    }
}
