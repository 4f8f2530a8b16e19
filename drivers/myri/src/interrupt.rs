//! Interrupts: a node's program asks to be told of the next frame for it instead
//! of polling (see the crate documentation, "Interrupts").

use super::*;

impl MyriNic {
    /// Asks for an interrupt at the next frame for this node: `true` once armed,
    /// `false` (left quiet) when a frame already waits in a ring or on a board,
    /// so that the program polls first. Producers that have an
    /// [`NicConfig::interrupt`] hook raise it.
    pub fn arm_interrupt(&mut self) -> bool {
        let Some(w) = self.interrupt_word() else {
            return false;
        };
        w.store(IRQ_ARMED, Ordering::SeqCst);
        // Ordered before the look below, as producers order their frame before
        // their look at this word.
        core::sync::atomic::fence(Ordering::SeqCst);
        if self.rx_ready().is_some() || self.boards_unseen().is_some() {
            self.disarm_interrupt();
            return false;
        }
        true
    }

    /// Back to polling: no interrupt wanted (one already raised stays raised for
    /// the host to see).
    pub fn disarm_interrupt(&self) {
        if let Some(w) = self.interrupt_word() {
            let _ = w.compare_exchange(IRQ_ARMED, IRQ_QUIET, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// This node's interrupt word ([`IRQ_QUIET`], [`IRQ_ARMED`], [`IRQ_RAISED`]),
    /// for a host that waits on it (a futex).
    pub fn interrupt_word(&self) -> Option<&AtomicU32> {
        irq_word(&self.region, &self.geo, self.me)
    }

    /// After a board frame was published: raises the interrupt of every reader
    /// that armed one.
    pub(super) fn raise_readers(&self) {
        let Some(raise) = self.cfg.interrupt else {
            return;
        };
        // One fence for every reader's word (see `raise_if_armed`).
        core::sync::atomic::fence(Ordering::SeqCst);
        for d in (0..self.geo.nodes).filter(|&d| d != self.me) {
            if let Some(w) = irq_word(&self.region, &self.geo, d) {
                raise_if_armed_after_fence(w, raise);
            }
        }
    }
}
