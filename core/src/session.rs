//! Run binding: a start-up exchange that makes every run of a job fresh.
//!
//! The keys of a job depend on its secret and its id only. A job started from a key
//! file and a fixed id (several machines, a hosts list, Slurm) has the same keys in
//! every run, and its sequence numbers start at 0 each time: frames recorded from
//! one run would verify in the next. So before its engine starts, every rank of a
//! job that crosses a network draws a random nonce and meets every other rank in a
//! HELLO exchange (WIRE.md, *HELLO*), each side echoing the other's nonce: a rank
//! takes a peer's nonce as this run's only once the peer has echoed its own fresh
//! one. The frame key of the run is then derived from the job's and every rank's
//! nonce ([`Session::run_key`]): frames of any other run never verify, and a rank
//! fed only recordings never finishes its start-up.
//!
//! Four HELLOs per pair on a clean network: A sends its nonce; B answers with its
//! own and A's echoed; A, now sure of B, answers with B's echoed and `DONE`; B
//! answers `DONE` and `SEEN` (it saw A's `DONE`). A side resends (backing off) to
//! each peer it is not through with, and answers every HELLO that lacks `SEEN`; a
//! running engine keeps answering late ones ([`crate::engine::Config::hello`]).

use core::hash::Hasher;

use managed::ManagedSlice;
use siphasher::sip128::{Hasher128, SipHasher24};

use crate::phy::{Device, RxToken, TxToken};
use crate::time::{Duration, Instant};
use crate::wire::{derive_key, AuthKey};
use crate::NodeAddr;

/// First byte of a HELLO (never a header's version, nor a compact frame's magic).
pub const HELLO_MAGIC: u8 = 0xC7;
/// Bytes of a HELLO: the fields, then a 16-byte tag.
pub const HELLO_LEN: usize = 60;
/// Bytes of a nonce.
pub const NONCE_LEN: usize = 16;
/// Bytes a HELLO's tag covers.
const BODY: usize = HELLO_LEN - 16;
/// Flag: the sender has this run's nonce of the receiver (the receiver echoed it).
const DONE: u8 = 1;
/// Flag: the sender saw the receiver's `DONE`.
const SEEN: u8 = 2;
/// First wait before a HELLO goes again to a peer not through, and the longest.
const RESEND_FIRST: Duration = Duration::from_millis(10);
const RESEND_MAX: Duration = Duration::from_millis(50);

/// One HELLO (WIRE.md, *HELLO*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Fabric address of the sender.
    pub from: u16,
    /// Fabric address of the receiver.
    pub to: u16,
    /// The job key of the headers (which job).
    pub job: u32,
    /// The sender's nonce for this run.
    pub nonce: [u8; NONCE_LEN],
    /// The receiver's nonce as the sender has it (zeros: none yet).
    pub echo: [u8; NONCE_LEN],
    /// The sender has this run's nonce of the receiver (`DONE`).
    pub done: bool,
    /// The sender saw the receiver's `DONE` (`SEEN`).
    pub seen: bool,
}

/// Why a HELLO was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloError {
    /// Too short, or not a HELLO.
    Malformed,
    /// Another job's, or to another rank.
    NotOurs,
    /// The tag does not verify under the job's hello key.
    BadTag,
}

/// The key HELLOs of a job are tagged under, derived from its frame key.
pub fn hello_key(frame_key: &AuthKey) -> AuthKey {
    derive_key(frame_key, b"volley hello key", 0)
}

fn hello_tag(key: &AuthKey, body: &[u8]) -> [u8; 16] {
    let mut h = SipHasher24::new_with_key(key);
    h.write(body);
    h.finish128().as_bytes()
}

impl Hello {
    /// Writes the HELLO, tagged under `key` (see [`hello_key`]).
    pub fn emit(&self, key: &AuthKey) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0] = HELLO_MAGIC;
        b[1] = if self.done { DONE } else { 0 } | if self.seen { SEEN } else { 0 };
        b[2..4].copy_from_slice(&self.from.to_be_bytes());
        b[4..6].copy_from_slice(&self.to.to_be_bytes());
        b[8..12].copy_from_slice(&self.job.to_be_bytes());
        b[12..28].copy_from_slice(&self.nonce);
        b[28..44].copy_from_slice(&self.echo);
        let t = hello_tag(key, &b[..BODY]);
        b[BODY..].copy_from_slice(&t);
        b
    }

    /// Reads an untrusted frame as a HELLO of job `job` to fabric address `me`,
    /// tagged under `key`. Never panics, whatever the bytes.
    pub fn parse(frame: &[u8], key: &AuthKey, job: u32, me: u16) -> Result<Hello, HelloError> {
        let b = frame.get(..HELLO_LEN).ok_or(HelloError::Malformed)?;
        if b[0] != HELLO_MAGIC || b[1] & !(DONE | SEEN) != 0 || b[6..8] != [0, 0] {
            return Err(HelloError::Malformed);
        }
        if !crate::wire::same(&hello_tag(key, &b[..BODY]), &b[BODY..]) {
            return Err(HelloError::BadTag);
        }
        let word = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let h = Hello {
            from: word(2),
            to: word(4),
            job: u32::from_be_bytes([b[8], b[9], b[10], b[11]]),
            nonce: b[12..28].try_into().map_err(|_| HelloError::Malformed)?,
            echo: b[28..44].try_into().map_err(|_| HelloError::Malformed)?,
            done: b[1] & DONE != 0,
            seen: b[1] & SEEN != 0,
        };
        if h.job != job || h.to != me || h.from == me {
            return Err(HelloError::NotOurs);
        }
        Ok(h)
    }
}

/// What a running engine needs to answer late HELLOs: this rank's nonce and the
/// job's hello key ([`crate::engine::Config::hello`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloConfig {
    /// This rank's nonce for the run.
    pub nonce: [u8; NONCE_LEN],
    /// The job's hello key ([`hello_key`]).
    pub key: AuthKey,
}

impl HelloConfig {
    /// The answer of a rank that is through to `h`, a valid HELLO to it, if `h`
    /// asks for one (it lacks `SEEN`): its nonce echoed, `DONE` and `SEEN`. Once
    /// through, a rank has every peer's nonce of this run and the peer is through
    /// with it or soon will be: echoing what `h` carries tells a recording nothing
    /// it did not have.
    pub fn answer(&self, me: u16, h: &Hello) -> Option<[u8; HELLO_LEN]> {
        (!h.seen).then(|| {
            Hello {
                from: me,
                to: h.from,
                job: h.job,
                nonce: self.nonce,
                echo: h.nonce,
                done: true,
                seen: h.done,
            }
            .emit(&self.key)
        })
    }
}

/// Where this rank stands with one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The peer's nonce as last heard (zeros: none yet).
    nonce: [u8; NONCE_LEN],
    known: bool,
    /// The peer echoed this rank's nonce: `nonce` is this run's.
    confirmed: bool,
    /// The peer said `DONE` to us.
    their_done: bool,
    /// A HELLO is owed now (the peer's lacked `SEEN`).
    owed: bool,
    /// When the next unasked HELLO goes, and the wait after it.
    next_at: Instant,
    backoff: Duration,
}

impl Peer {
    /// A peer not heard from.
    pub const NEW: Peer = Peer {
        nonce: [0; NONCE_LEN],
        known: false,
        confirmed: false,
        their_done: false,
        owed: false,
        next_at: Instant::ZERO,
        backoff: RESEND_FIRST,
    };

    fn through(&self) -> bool {
        self.confirmed && self.their_done
    }
}

/// Counters of a start-up exchange.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionStats {
    /// HELLOs sent.
    pub sent: u64,
    /// Valid HELLOs taken.
    pub taken: u64,
    /// Frames dropped: too short or not a HELLO.
    pub malformed: u64,
    /// Frames dropped: another job's, or to another rank.
    pub not_ours: u64,
    /// Frames dropped: the tag did not verify.
    pub bad_tag: u64,
    /// Valid HELLOs whose echo was not this run's nonce (a recording, or a peer
    /// that has not heard from us yet).
    pub stale_echo: u64,
}

/// One rank's side of the start-up exchange with every other rank of a job
/// (fabric addresses `0..peers.len()`, this one included and skipped).
#[derive(Debug)]
pub struct Session<'a> {
    me: u16,
    job: u32,
    frame_key: AuthKey,
    hello: HelloConfig,
    peers: ManagedSlice<'a, Peer>,
    /// Peers not through yet (this rank excluded).
    left: usize,
    stats: SessionStats,
}

impl<'a> Session<'a> {
    /// The exchange of fabric address `me` in a job of `peers.len()` ranks (each
    /// entry [`Peer::NEW`]), with job key `job` (the headers') and frame key
    /// `frame_key` (the job's), drawing on `nonce`, which must be random and never
    /// used by another run.
    pub fn new(
        me: u16,
        job: u32,
        frame_key: AuthKey,
        nonce: [u8; NONCE_LEN],
        mut peers: ManagedSlice<'a, Peer>,
    ) -> Self {
        peers.iter_mut().for_each(|p| *p = Peer::NEW);
        let left = peers
            .len()
            .saturating_sub(usize::from((me as usize) < peers.len()));
        Session {
            me,
            job,
            frame_key,
            hello: HelloConfig {
                nonce,
                key: hello_key(&frame_key),
            },
            peers,
            left,
            stats: SessionStats::default(),
        }
    }

    /// [`Session::new`] for `n` ranks, with a table of its own.
    #[cfg(feature = "alloc")]
    pub fn with_ranks(
        me: u16,
        n: usize,
        job: u32,
        frame_key: AuthKey,
        nonce: [u8; NONCE_LEN],
    ) -> Session<'static> {
        Session::new(me, job, frame_key, nonce, alloc::vec![Peer::NEW; n].into())
    }

    /// Takes a received frame: `true` if it was a valid HELLO of this job to this
    /// rank (whatever it changed), `false` for anything else (counted).
    pub fn handle(&mut self, frame: &[u8]) -> bool {
        let h = match Hello::parse(frame, &self.hello.key, self.job, self.me) {
            Ok(h) => h,
            Err(e) => {
                match e {
                    HelloError::Malformed => self.stats.malformed += 1,
                    HelloError::NotOurs => self.stats.not_ours += 1,
                    HelloError::BadTag => self.stats.bad_tag += 1,
                }
                return false;
            }
        };
        let Some(p) = self.peers.get_mut(h.from as usize) else {
            self.stats.not_ours += 1;
            return false;
        };
        self.stats.taken += 1;
        let was = p.through();
        let fresh = h.echo == self.hello.nonce;
        if !p.confirmed {
            // The latest nonce heard, until one comes with our own echoed: that one
            // is this run's, and stays.
            p.nonce = h.nonce;
            p.known = true;
            p.confirmed = fresh;
        }
        if !fresh {
            self.stats.stale_echo += 1;
        } else if h.nonce == p.nonce && h.done {
            p.their_done = true;
        }
        if !h.seen {
            p.owed = true;
        }
        if !was && p.through() {
            self.left -= 1;
        }
        true
    }

    /// Sends what is due at `now` through `send(to, hello)` (which says whether it
    /// went): HELLOs owed, and resends to peers not through.
    pub fn poll_transmit(&mut self, now: Instant, mut send: impl FnMut(NodeAddr, &[u8]) -> bool) {
        for i in 0..self.peers.len() {
            if i == self.me as usize {
                continue;
            }
            let p = self.peers[i];
            let due = !p.through() && now >= p.next_at;
            if !(p.owed || due) {
                continue;
            }
            let hello = Hello {
                from: self.me,
                to: i as u16,
                job: self.job,
                nonce: self.hello.nonce,
                echo: if p.known { p.nonce } else { [0; NONCE_LEN] },
                done: p.confirmed,
                seen: p.their_done,
            }
            .emit(&self.hello.key);
            if !send(NodeAddr(i as u16), &hello) {
                return;
            }
            self.stats.sent += 1;
            let p = &mut self.peers[i];
            p.owed = false;
            if due {
                p.next_at = now + p.backoff;
                p.backoff = if p.backoff.doubled() > RESEND_MAX {
                    RESEND_MAX
                } else {
                    p.backoff.doubled()
                };
            }
        }
    }

    /// One round of the exchange over `dev` at `now`: takes what has arrived
    /// (anything but a HELLO, such as a frame of a peer through already whose
    /// engine runs under the run key, is dropped: it comes again once this rank is
    /// through), then sends what is due.
    pub fn poll<D: Device>(&mut self, now: Instant, dev: &mut D) {
        for _ in 0..256 {
            let Some(tok) = dev.receive(now) else { break };
            tok.consume(|f| self.handle(f));
        }
        self.poll_transmit(now, |to, f| match dev.transmit(now, to) {
            Some(tx) => {
                tx.consume(f.len(), |b| b.copy_from_slice(f));
                true
            }
            None => false,
        });
        dev.flush(now);
    }

    /// When [`Session::poll`] next has something to send with no frame arriving:
    /// now for a HELLO owed, else the earliest resend to a peer not through;
    /// `None` once nothing is left to send. A rank that waits for frames until
    /// then instead of polling on lets the others of a crowded host run.
    pub fn poll_at(&self) -> Option<Instant> {
        let me = self.me as usize;
        self.peers
            .iter()
            .enumerate()
            .filter(|&(i, p)| i != me && (p.owed || !p.through()))
            .map(|(_, p)| if p.owed { Instant::ZERO } else { p.next_at })
            .min()
    }

    /// Whether every peer is through: each has echoed this rank's nonce and has
    /// this rank's echo of its own.
    pub fn complete(&self) -> bool {
        self.left == 0
    }

    /// Whether a valid HELLO ever came from fabric address `r` (of this run or not).
    pub fn heard_from(&self, r: u16) -> bool {
        self.peers.get(r as usize).is_some_and(|p| p.known)
    }

    /// The fabric addresses of the peers not through yet.
    pub fn waiting_for(&self) -> impl Iterator<Item = u16> + '_ {
        let me = self.me as usize;
        self.peers
            .iter()
            .enumerate()
            .filter(move |&(i, p)| i != me && !p.through())
            .map(|(i, _)| i as u16)
    }

    /// The frame key of this run, once [`Session::complete`]: derived from the job's
    /// and every rank's nonce in address order, so every rank computes the same,
    /// and no other run's. HKDF-SHA256 (RFC 5869): the job's frame key as salt,
    /// the nonces end to end as input key material, `"volley run key"` as info.
    pub fn run_key(&self) -> Option<AuthKey> {
        if !self.complete() {
            return None;
        }
        let nonces = self.peers.iter().enumerate().map(|(i, p)| {
            if i == self.me as usize {
                &self.hello.nonce[..]
            } else {
                &p.nonce[..]
            }
        });
        Some(crate::wire::hkdf16(
            &self.frame_key,
            nonces,
            &[b"volley run key"],
        ))
    }

    /// What the engine needs to answer late HELLOs.
    pub fn hello_config(&self) -> HelloConfig {
        self.hello
    }

    /// Counters.
    pub fn stats(&self) -> SessionStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    const KEY: AuthKey = *b"session test key";

    /// Runs `n` ranks' exchanges over a lossless fabric (frames dropped where
    /// `drop(from, to, k)` says so), advancing a clock 1 ms a round; the rounds it
    /// took, or `None` after 10,000.
    fn exchange(
        sessions: &mut [Session<'_>],
        drop: &mut dyn FnMut(usize, usize, u64) -> bool,
    ) -> Option<u32> {
        let mut k = 0u64;
        for round in 0..10_000u32 {
            if sessions.iter().all(|s| s.complete()) {
                return Some(round);
            }
            let now = Instant::from_millis(round as u64);
            let mut wire: Vec<(usize, usize, Vec<u8>)> = Vec::new();
            for (i, s) in sessions.iter_mut().enumerate() {
                s.poll_transmit(now, |to, f| {
                    wire.push((i, to.0 as usize, f.to_vec()));
                    true
                });
            }
            for (from, to, f) in wire {
                k += 1;
                if !drop(from, to, k) {
                    assert!(sessions[to].handle(&f));
                }
            }
        }
        None
    }

    fn ranks(n: usize, salt: u8) -> Vec<Session<'static>> {
        (0..n)
            .map(|i| Session::with_ranks(i as u16, n, 7, KEY, [salt ^ i as u8 ^ 0x5a; 16]))
            .collect()
    }

    #[test]
    fn every_rank_gets_through_and_derives_one_key() {
        for n in [1usize, 2, 5] {
            let mut s = ranks(n, 1);
            let rounds = exchange(&mut s, &mut |_, _, _| false).expect("through");
            assert!(rounds <= 3, "{n} ranks: {rounds} rounds");
            let key = s[0].run_key().unwrap();
            assert!(s.iter().all(|x| x.run_key() == Some(key)));
            assert_ne!(key, KEY);
            // Both sides of each pair start at once: three HELLOs each way, no
            // resend on a clean network.
            let sent: u64 = s.iter().map(|x| x.stats().sent).sum();
            assert_eq!(sent, 6 * (n * n.saturating_sub(1) / 2) as u64, "{n} ranks");
        }
    }

    /// A rank may sleep until `poll_at`: it is now while a HELLO is owed, the next
    /// resend while a peer is not through, and never once every peer is.
    #[test]
    fn poll_at_says_when_the_next_hello_is_due() {
        let mut s = ranks(2, 3);
        assert_eq!(s[0].poll_at(), Some(Instant::ZERO));
        let t = Instant::from_millis(5);
        let mut sent = Vec::new();
        s[0].poll_transmit(t, |_, f| {
            sent.push(f.to_vec());
            true
        });
        // Nothing heard: the next is the first resend.
        assert_eq!(s[0].poll_at(), Some(t + RESEND_FIRST));
        // A HELLO that lacks `SEEN` is owed an answer at once.
        assert!(s[1].handle(&sent[0]));
        assert_eq!(s[1].poll_at(), Some(Instant::ZERO));
        exchange(&mut s, &mut |_, _, _| false).expect("through");
        assert_eq!((s[0].poll_at(), s[1].poll_at()), (None, None));
    }

    #[test]
    fn losses_are_resent_until_everyone_is_through() {
        let mut s = ranks(4, 2);
        // Every third HELLO lost.
        exchange(&mut s, &mut |_, _, k| k % 3 == 0).expect("through");
        let key = s[0].run_key().unwrap();
        assert!(s.iter().all(|x| x.run_key() == Some(key)));
    }

    #[test]
    fn another_run_has_another_key() {
        let mut a = ranks(3, 1);
        let mut b = ranks(3, 2);
        exchange(&mut a, &mut |_, _, _| false).unwrap();
        exchange(&mut b, &mut |_, _, _| false).unwrap();
        assert_ne!(a[0].run_key(), b[0].run_key());
    }

    /// A rank of a new run fed only the HELLOs recorded from an earlier run (which
    /// echo the earlier nonces) never gets through.
    #[test]
    fn recordings_of_an_earlier_run_never_get_a_rank_through() {
        let mut old = ranks(2, 1);
        let mut recorded: Vec<Vec<u8>> = Vec::new();
        for round in 0..5 {
            let now = Instant::from_millis(round);
            let mut wire = Vec::new();
            for (i, s) in old.iter_mut().enumerate() {
                s.poll_transmit(now, |to, f| {
                    wire.push((i, to.0 as usize, f.to_vec()));
                    true
                });
            }
            for (from, to, f) in wire {
                if from == 0 {
                    recorded.push(f.clone());
                }
                old[to].handle(&f);
            }
        }
        assert!(old[1].complete());
        // Rank 1 again, with a fresh nonce; rank 0 absent, its HELLOs replayed.
        let mut lone = Session::with_ranks(1, 2, 7, KEY, [0xEE; 16]);
        for round in 0..1000 {
            for f in &recorded {
                assert!(lone.handle(f), "valid HELLOs of the job");
            }
            lone.poll_transmit(Instant::from_millis(round), |_, _| true);
        }
        assert!(!lone.complete());
        assert_eq!(lone.run_key(), None);
        assert_eq!(lone.waiting_for().collect::<Vec<_>>(), [0]);
        assert!(lone.stats().stale_echo > 0);
    }

    #[test]
    fn forged_and_foreign_hellos_are_refused() {
        let mut s = Session::with_ranks(1, 3, 7, KEY, [1; 16]);
        let h = Hello {
            from: 0,
            to: 1,
            job: 7,
            nonce: [2; 16],
            echo: [1; 16],
            done: true,
            seen: false,
        };
        let good = h.emit(&hello_key(&KEY));
        let mut bad = good;
        bad[20] ^= 1;
        assert!(!s.handle(&bad));
        assert!(!s.handle(&good[..HELLO_LEN - 1]));
        assert!(!s.handle(&Hello { job: 8, ..h }.emit(&hello_key(&KEY))));
        assert!(!s.handle(&Hello { to: 2, ..h }.emit(&hello_key(&KEY))));
        assert!(!s.handle(&Hello { from: 9, ..h }.emit(&hello_key(&KEY))));
        assert!(!s.handle(&h.emit(&hello_key(b"another job key!"))));
        let st = s.stats();
        assert_eq!((st.bad_tag, st.malformed, st.not_ours), (2, 1, 3));
        assert!(s.handle(&good));
        // Random bytes never panic.
        let mut x = 0x1234_5678u32;
        for len in 0..200 {
            let f: Vec<u8> = (0..len)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    if i == 0 {
                        HELLO_MAGIC
                    } else {
                        x as u8
                    }
                })
                .collect();
            let _ = s.handle(&f);
        }
    }

    /// A rank through answers a late HELLO from its running engine
    /// ([`HelloConfig::answer`]), and the straggler gets through with it.
    #[test]
    fn a_running_rank_answers_a_late_one() {
        let mut s = ranks(2, 3);
        exchange(&mut s, &mut |_, _, _| false).unwrap();
        let running = s[0].hello_config();
        let key = s[0].run_key();
        // Rank 1 as if it had lost the last HELLO: a new session, same nonce.
        let mut late = Session::with_ranks(1, 2, 7, KEY, [3 ^ 1 ^ 0x5a; 16]);
        for round in 0..10 {
            let mut out = Vec::new();
            late.poll_transmit(Instant::from_millis(round), |_, f| {
                out.push(f.to_vec());
                true
            });
            for f in out {
                let h = Hello::parse(&f, &running.key, 7, 0).unwrap();
                if let Some(a) = running.answer(0, &h) {
                    late.handle(&a);
                }
            }
        }
        assert!(late.complete());
        assert_eq!(late.run_key(), key);
    }
}
