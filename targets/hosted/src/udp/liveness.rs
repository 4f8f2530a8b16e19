//! ICMP reports as a hint: a peer reported unreachable is suspect, and counts as
//! gone only after a silence.

use super::*;

/// How long after our socket opened a peer we never heard from may refuse our
/// datagrams without counting as gone. Ranks start unsynchronised, so at first an
/// unbound port may be a peer still starting; but a peer whose first datagrams
/// reached us before we bound, and which then died, is never heard, and must not
/// cost the whole `VOLLEY_PEER_TIMEOUT`.
pub(super) const UNHEARD_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a peer whose port two ICMP reports called closed, with nothing heard
/// from it between, may stay silent before it counts as gone. ICMP is not
/// authenticated (any host can forge it), so a report only makes the peer suspect:
/// a live one answers the retransmissions that follow (or its beacons, at most
/// [`crate::beacon::frame_interval`] apart, speak for it) well within this; a dead
/// one is gone this long after its second report.
pub(super) const SUSPECT_FOR: std::time::Duration = std::time::Duration::from_millis(500);

/// The most error-queue entries one [`Liveness::read_errors`] reads (a flood of
/// forged reports must not hold a rank there).
const ERRORS_READ_MAX: usize = 4096;

/// What the socket's ICMP errors tell about the peers.
#[derive(Debug)]
pub(super) struct Liveness {
    /// Source address -> rank, for the datagrams we accept.
    pub(super) ranks: HashMap<SocketAddr, u16>,
    /// The last source looked up and its rank: datagrams mostly come in runs from
    /// one peer, and a comparison is cheaper than hashing the address.
    pub(super) last: Option<(SocketAddr, u16)>,
    /// When this rank's socket was bound.
    pub(super) opened: std::time::Instant,
    /// Per rank: heard from at least once; "port unreachable" reports since we last
    /// heard from it; since when those reports make it suspect; declared gone.
    pub(super) heard: Vec<bool>,
    pub(super) strikes: Vec<u8>,
    pub(super) suspect: Vec<Option<std::time::Instant>>,
    pub(super) gone: Vec<bool>,
}

impl Liveness {
    /// The rank at `from`, if it is one.
    #[inline]
    pub(super) fn rank_of(&mut self, from: &SocketAddr) -> Option<u16> {
        match self.last {
            Some((a, r)) if a == *from => Some(r),
            _ => {
                let r = *self.ranks.get(from)?;
                self.last = Some((*from, r));
                Some(r)
            }
        }
    }

    /// Reads the socket's error queue to the end: "port unreachable" reports for a
    /// peer make it suspect (see [`SUSPECT_FOR`]). All of it, or as much as a
    /// flood leaves room for: the socket reports a queued error only once, so a
    /// report left behind would be read at the next one, maybe long after the peer
    /// it names has started and spoken, and taken as news (with 64 ranks starting
    /// on a few cores, one rank's start-up leaves hundreds).
    pub(super) fn read_errors(&mut self, sock: &UdpSocket, stats: &mut UdpStats) {
        for _ in 0..ERRORS_READ_MAX {
            let mut data = [0u8; 64];
            let mut refused = false;
            let flags = libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT;
            let mut control = [0u64; 64];
            let got = recv_msg(sock, &mut data, &mut control, flags, |level, kind, d| {
                // An IP_RECVERR message carries a sock_extended_err: ee_errno first.
                if level == libc::IPPROTO_IP && kind == libc::IP_RECVERR && d.len() >= 4 {
                    let errno = u32::from_ne_bytes([d[0], d[1], d[2], d[3]]);
                    refused |= errno == libc::ECONNREFUSED as u32;
                }
            });
            let Ok((n, to, _)) = got else {
                return;
            };
            // A report about a start-up HELLO (the refused datagram comes back in
            // it) says nothing of a peer's death: HELLOs go to peers that have not
            // bound their port yet, and with many ranks starting on few cores the
            // reports can come after the peer's first word. A peer that dies later
            // refuses the engine's frames.
            if n > 0 && data[0] == volley_core::session::HELLO_MAGIC {
                stats.hello_refusals += 1;
                continue;
            }
            if let Some(&r) = self.ranks.get(&to) {
                if refused && self.refused_by(r as usize, std::time::Instant::now()) {
                    stats.suspected += 1;
                }
            }
        }
    }

    /// Counts a "port unreachable" about rank `r`; true when it makes `r` suspect.
    /// One report may be about a datagram older than the peer's last word: a second
    /// one with nothing heard in between says the port is closed, if it is true. A
    /// peer never heard from may not have bound its socket yet, until
    /// [`UNHEARD_GRACE`] is over.
    pub(super) fn refused_by(&mut self, r: usize, now: std::time::Instant) -> bool {
        let starting = !self.heard[r] && now.duration_since(self.opened) < UNHEARD_GRACE;
        if self.gone[r] || self.suspect[r].is_some() || starting {
            return false;
        }
        self.strikes[r] = self.strikes[r].saturating_add(1);
        if self.strikes[r] < 2 {
            return false;
        }
        self.suspect[r] = Some(now);
        true
    }

    /// A datagram came from rank `r`: whatever ICMP said, it speaks.
    #[inline]
    pub(super) fn heard_from(&mut self, r: usize) {
        if let Some(h) = self.heard.get_mut(r) {
            *h = true;
            self.strikes[r] = 0;
            self.suspect[r] = None;
        }
    }

    /// Whether rank `r` is gone: suspect, and silent since for [`SUSPECT_FOR`]
    /// (counted in `stats` once).
    pub(super) fn gone_at(
        &mut self,
        r: usize,
        now: std::time::Instant,
        stats: &mut UdpStats,
    ) -> bool {
        if let Some(since) = self.suspect.get(r).copied().flatten() {
            if !self.gone[r] && now.saturating_duration_since(since) >= SUSPECT_FOR {
                self.gone[r] = true;
                stats.unreachable += 1;
            }
        }
        self.gone.get(r).copied().unwrap_or(false)
    }
}

/// Runs a send once more where it failed only to report an ICMP error about an
/// earlier datagram (`ECONNREFUSED`: the socket's pending error, which that call
/// cleared instead of sending): such reports are not authenticated, and a stream of
/// forged ones must not silence this rank.
pub(super) fn again_after_report<T>(
    mut send: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    match send() {
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => send(),
        r => r,
    }
}
