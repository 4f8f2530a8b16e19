//! An engine's counters.

/// Counters, in the spirit of LFC's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Frames handed to the device.
    pub tx_frames: u64,
    /// Payload bytes handed to the device.
    pub tx_bytes: u64,
    /// Frames sent again after a timeout or refusal.
    pub retransmits: u64,
    /// Frames that were acks only.
    pub tx_acks: u64,
    /// Frames received from the device.
    pub rx_frames: u64,
    /// Of those, whole messages taken by header prediction (`rx_predicted`): the
    /// next message of their channel in the commonest shape.
    pub rx_predicted: u64,
    /// Frames dropped for a bad CRC.
    pub rx_bad_crc: u64,
    /// Of those, frames under the compact header (`wire::compact`).
    pub rx_compact: u64,
    /// Frames sent under the compact header.
    pub tx_compact: u64,
    /// Handlers' sends that left at once when their handler returned
    /// (`Engine::send_queued_at_once`), not through a transmit pass.
    pub tx_queued_at_once: u64,
    /// Short reliable messages sent with their copy kept by the channel (no
    /// operation, no eager buffer): `Engine::send_now`'s commonest case.
    pub tx_short: u64,
    /// Frames dropped for a missing or wrong authentication tag (with a job key),
    /// and compact frames from a device that does not vouch for them or in a job
    /// with a key.
    pub rx_unauthenticated: u64,
    /// Frames dropped as malformed (length, version, kind, fields).
    pub rx_malformed: u64,
    /// Frames of another job key.
    pub rx_foreign_job: u64,
    /// Frames addressed to another group or instance.
    pub rx_foreign_group: u64,
    /// Frames whose sender is not in the group table.
    pub rx_unknown_source: u64,
    /// Frames whose header names another sender than the one the device saw.
    pub rx_spoofed: u64,
    /// Reliable frames received twice.
    pub rx_duplicates: u64,
    /// Frames beyond the advertised window.
    pub rx_out_of_window: u64,
    /// Frames refused for now (port busy or not bound): the sender retries.
    pub rx_refused: u64,
    /// Frames of kinds this engine does not serve yet.
    pub rx_unsupported: u64,
    /// Reliable messages discarded because their port was not bound for input
    /// (their senders were told).
    pub rx_rejected: u64,
    /// Of our reliable messages, those the receiver discarded.
    pub tx_rejected: u64,
    /// Best-effort frames dropped (unbound port, stale, after a gap).
    pub rx_dropped: u64,
    /// Messages handed to ports.
    pub delivered: u64,
    /// Messages reported lost.
    pub lost: u64,
    /// Messages truncated.
    pub truncated: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Peers declared dead.
    pub peers_failed: u64,
    /// Times timers were taken more than [`super::NOT_RUNNING_AFTER`] late (the
    /// lateness was not counted as peers' silence).
    pub resumed: u64,
    /// Peers that said goodbye ([`Engine::say_goodbye`](super::Engine::say_goodbye)).
    pub peers_left: u64,
    /// Times a peer silent for the whole peer timeout was waited for again because
    /// the device had seen its process alive ([`crate::phy::Liveness::peer_vouched`]).
    pub peers_vouched: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Of those, barriers the device ran in its own memory (no frames).
    pub device_barriers: u64,
    /// Gets answered from our memory.
    pub rma_served: u64,
    /// Puts and gets whose address we refused (or that failed to copy).
    pub rma_denied: u64,
    /// Puts and get replies that landed in our memory.
    pub rma_landed: u64,
    /// Reliable broadcasts and multicast packets of other roots passed on to our
    /// children in the tree.
    pub forwarded: u64,
    /// Notices dropped because nobody took them (see [`Storage::notices`](super::Storage::notices)).
    pub notices_dropped: u64,
    /// Notices whose handler ran inside the poll that received their frame (see
    /// [`Upcalls`](super::Upcalls)), none queued.
    pub upcalls_in_poll: u64,
    /// Our broadcasts written once into the device's board (not one frame a member).
    pub board_tx: u64,
    /// Of those, the ones written in the sending or launching call, with no copy
    /// or queue (nothing of ours waited before them).
    pub board_now: u64,
    /// Other roots' broadcasts taken from their boards.
    pub board_rx: u64,
    /// Flat broadcasts of ours that waited for every member to have our earlier
    /// ones (see `fence`).
    pub fences: u64,
    /// Messages whose sender died (or whose relay's upstream did) before the last
    /// of them came: handed to their port as lost (see `orphan`).
    pub rx_orphaned: u64,
    /// Copies of tree broadcasts sent to a dead member's children in its place.
    pub rerouted: u64,
    /// Fences we answered without the root's earlier broadcasts, because a relay
    /// above us in its tree died (see `orphan`).
    pub fences_given_up: u64,
    /// Late HELLOs answered ([`Config::hello`](super::Config::hello)).
    pub hellos_answered: u64,
    /// HELLOs dropped: bad tag, another job or rank, none expected, no room to answer.
    pub hellos_dropped: u64,
}
