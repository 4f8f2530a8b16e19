//! Late HELLOs: a rank still in its start-up exchange (`crate::session`) may reach
//! an engine that has finished its own; the engine answers from [`Config::hello`]
//! at its next transmit pass. The answers wait here, a few at a time.

use super::*;
use crate::session::{Hello, HELLO_LEN};

/// Answers an engine holds at once; more are dropped (their senders ask again).
const HELLO_OUT: usize = 4;

/// Answers to late HELLOs waiting to go: fabric address and frame.
#[derive(Debug)]
pub(super) struct LateHellos {
    out: [(u16, [u8; HELLO_LEN]); HELLO_OUT],
    len: u8,
}

impl LateHellos {
    pub(super) const fn new() -> Self {
        LateHellos {
            out: [(0, [0; HELLO_LEN]); HELLO_OUT],
            len: 0,
        }
    }

    /// Whether answers wait for the next transmit pass.
    #[inline]
    pub(super) fn waiting(&self) -> bool {
        self.len > 0
    }

    /// Takes HELLO `frame` for `me` (received from `source`, where the device
    /// names it) under `cfg`'s hello settings. `false`: dropped (no settings, a
    /// bad or foreign HELLO, no room); an answer is queued where it asks for one.
    fn take(&mut self, cfg: &Config, me: NodeAddr, frame: &[u8], src: Option<NodeAddr>) -> bool {
        let Some(hc) = cfg.hello else {
            return false;
        };
        let h = match Hello::parse(frame, &hc.key, cfg.job_key, me.0) {
            Ok(h) if src.is_none_or(|s| s.0 == h.from) => h,
            _ => return false,
        };
        let Some(answer) = hc.answer(me.0, &h) else {
            return true;
        };
        let Some(slot) = self.out.get_mut(self.len as usize) else {
            return false;
        };
        *slot = (h.from, answer);
        self.len += 1;
        true
    }

    /// Sends the waiting answers; those the device has no room for are dropped
    /// (their senders ask again). Returns how many left.
    fn send<D: Device>(&mut self, now: Instant, dev: &mut D) -> usize {
        let mut sent = 0;
        for &(to, frame) in &self.out[..self.len as usize] {
            if let Some(tx) = dev.transmit(now, NodeAddr(to)) {
                tx.consume(frame.len(), |b| b.copy_from_slice(&frame));
                sent += 1;
            }
        }
        self.len = 0;
        sent
    }
}

impl Engine<'_> {
    /// A HELLO from a rank still in its start-up exchange: answered if it asks.
    #[cold]
    #[inline(never)]
    pub(super) fn rx_hello(&mut self, frame: &[u8], source: Option<NodeAddr>) {
        let Ok(me) = self.addr_of(self.cfg.group, self.cfg.node) else {
            return;
        };
        if !self.hellos.take(&self.cfg, me, frame, source) {
            self.stats.hellos_dropped += 1;
        }
    }

    /// Sends the answers to late HELLOs that wait.
    pub(super) fn send_hellos<D: Device>(&mut self, now: Instant, dev: &mut D) -> usize {
        let sent = self.hellos.send(now, dev);
        self.stats.hellos_answered += sent as u64;
        sent
    }
}
