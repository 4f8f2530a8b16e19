//! Liveness: node states, heartbeats and beacons that vouch for a node that
//! does not poll.

use super::*;

#[derive(Debug, Clone, Copy)]
pub(super) struct Watch {
    pub(super) beat: u64,
    pub(super) since: Instant,
    pub(super) seen: bool,
}

impl Watch {
    pub(super) const NEW: Watch = Watch {
        beat: 0,
        since: Instant::ZERO,
        seen: false,
    };
}

/// How recently, by the host's clock ([`NicConfig::host_clock`]), a peer's beacon
/// must have beaten for [`volley_core::phy::Liveness::peer_vouched`] (a [`Beacon`] is meant to beat
/// every few hundred milliseconds).
pub const VOUCH_WINDOW: Duration = Duration::from_secs(2);

/// A node's beacon: the `beacon` word of its entry in the node table, in which a
/// helper of the node's process writes the host's clock whatever its program does
/// (computes, sleeps), so that a peer waiting for a frame from it knows the process
/// lives ([`volley_core::phy::Liveness::peer_vouched`]) rather than taking silence for death. It holds
/// a region of its own (another mapping of the same memory), for another thread.
#[derive(Debug)]
pub struct Beacon {
    pub(super) region: Region,
    pub(super) at: usize,
}

impl Beacon {
    /// The beacon of node `node` in `region`, a region whose header a NIC has
    /// checked (its magic and version are checked again here).
    pub fn new(region: Region, node: u32) -> Result<Beacon, MyriError> {
        let magic = region.u64_at(off::MAGIC)?.load(Ordering::Acquire);
        if magic != MAGIC || region.u32_at(off::VERSION)?.load(Ordering::Relaxed) != VERSION {
            return Err(MyriError::NotReady {
                magic,
                generation: region.u64_at(off::GENERATION)?.load(Ordering::Relaxed),
            });
        }
        if node >= region.u32_at(off::NODES)?.load(Ordering::Relaxed) {
            return Err(MyriError::BadNode);
        }
        let at = off::NODE_TABLE + 64 * node as usize + off::NODE_BEACON;
        region.u64_at(at)?;
        Ok(Beacon { region, at })
    }

    /// Beats: writes `now`, the host's clock ([`NicConfig::host_clock`]; zero
    /// means "never beat").
    pub fn beat(&mut self, now: u64) {
        if let Ok(w) = self.region.u64_at(self.at) {
            w.store(now.max(1), Ordering::Relaxed);
        }
    }
}

impl MyriNic {
    /// Whether node `p`'s beacon beat within [`VOUCH_WINDOW`] by the host's clock
    /// (never without one, or for a node whose beacon never beat).
    pub(super) fn beacon_fresh(&self, p: u32) -> bool {
        let Some(clock) = self.cfg.host_clock else {
            return false;
        };
        let b = self
            .node_dword(p, off::NODE_BEACON)
            .map_or(0, |w| w.load(Ordering::Relaxed));
        // A beat read a moment before our clock is fresh too (no wrap).
        b != 0 && clock().saturating_sub(b) < VOUCH_WINDOW.total_nanos()
    }

    /// A node's state word.
    pub fn state(&self, node: u32) -> NodeState {
        self.node_word(node, off::NODE_STATE)
            .map_or(NodeState::Absent, |w| {
                NodeState::from_u32(w.load(Ordering::Acquire))
            })
    }

    /// The process id a node recorded when it joined.
    pub fn pid(&self, node: u32) -> u32 {
        self.node_word(node, off::NODE_PID)
            .map_or(0, |w| w.load(Ordering::Relaxed))
    }

    /// Declares `node` dead (a launcher saw its process exit): peers stop waiting for it.
    pub fn mark_dead(&self, node: u32) {
        if let Some(w) = self.node_word(node, off::NODE_STATE) {
            let _ = w.compare_exchange(
                NodeState::Alive as u32,
                NodeState::Dead as u32,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Leaves the region cleanly.
    pub fn leave(&self) {
        if let Some(w) = self.node_word(self.me, off::NODE_STATE) {
            w.store(NodeState::Exited as u32, Ordering::Release);
        }
    }

    #[inline]
    pub(super) fn heartbeat(&mut self) {
        self.beat = self.beat.wrapping_add(1);
        let at = self.geo.node_entry(self.me) + off::NODE_HEARTBEAT;
        // SAFETY: `me` is below the node count (`attach`), and the node table
        // (`barrier_table` = 64 bytes a node past `NODE_TABLE`) ends inside the
        // header, inside the region (`check_fits`); entries are 64-aligned.
        unsafe { self.region.u64_unchecked(at) }.store(self.beat, Ordering::Relaxed);
    }
}
