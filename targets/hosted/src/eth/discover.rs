//! Discovery: authenticated broadcast hellos that tell each rank its peers' MAC
//! addresses.

use super::*;

/// A hello: "I am rank `rank` of `size` of the job with header key `job_key`, at
/// `mac`"; `ask` asks for an answer. 36 bytes of Ethernet payload: magic, version,
/// kind, rank, size, job key, MAC, and a 16-byte SipHash tag under the job's hello key
/// over the rest. The tag binds the MAC, so a replayed hello cannot move a rank
/// elsewhere; it does not stop a replay from the rank's own address, which says
/// nothing new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// Wants an answer.
    pub ask: bool,
    /// Sender's rank.
    pub rank: u16,
    /// Job size.
    pub size: u16,
    /// The job key of frame headers.
    pub job_key: u32,
    /// Sender's MAC address.
    pub mac: [u8; 6],
}

pub(super) const HELLO_MAGIC: &[u8; 4] = b"VLYH";
pub(super) const HELLO_BODY: usize = 20;
/// Length of a hello's payload.
pub const HELLO_LEN: usize = HELLO_BODY + 16;

impl Hello {
    pub(super) fn tag(key: &[u8; 16], body: &[u8]) -> [u8; 16] {
        use siphasher::sip128::{Hasher128, SipHasher24};
        use std::hash::Hasher;
        let mut h = SipHasher24::new_with_key(key);
        h.write(body);
        h.finish128().as_bytes()
    }

    /// Writes the hello, tagged under `key`.
    pub fn emit(&self, key: &[u8; 16]) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(HELLO_MAGIC);
        b[4] = 1;
        b[5] = if self.ask { 1 } else { 2 };
        b[6..8].copy_from_slice(&self.rank.to_le_bytes());
        b[8..10].copy_from_slice(&self.size.to_le_bytes());
        b[10..14].copy_from_slice(&self.job_key.to_le_bytes());
        b[14..20].copy_from_slice(&self.mac);
        let t = Hello::tag(key, &b[..HELLO_BODY]);
        b[HELLO_BODY..].copy_from_slice(&t);
        b
    }

    /// Reads a hello tagged under `key`; `None` for anything else.
    pub fn parse(b: &[u8], key: &[u8; 16]) -> Option<Hello> {
        let b = b.get(..HELLO_LEN)?;
        if &b[0..4] != HELLO_MAGIC || b[4] != 1 || !matches!(b[5], 1 | 2) {
            return None;
        }
        let t = Hello::tag(key, &b[..HELLO_BODY]);
        // Constant-time: no early exit on the first differing byte.
        if t.iter()
            .zip(&b[HELLO_BODY..])
            .fold(0u8, |a, (x, y)| a | (x ^ y))
            != 0
        {
            return None;
        }
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&b[14..20]);
        Some(Hello {
            ask: b[5] == 1,
            rank: u16::from_le_bytes([b[6], b[7]]),
            size: u16::from_le_bytes([b[8], b[9]]),
            job_key: u32::from_le_bytes([b[10], b[11], b[12], b[13]]),
            mac,
        })
    }
}

/// The hello socket: a plain packet socket for [`HELLO_ETHERTYPE`], read without
/// blocking.
#[derive(Debug)]
pub(super) struct Hellos {
    pub(super) fd: OwnedFd,
    pub(super) key: [u8; 16],
    pub(super) me: Hello,
    pub(super) buf: Vec<u8>,
}

impl Hellos {
    pub(super) fn send(&self, iface: &Interface, to: [u8; 6], ask: bool) -> bool {
        let mut f = [0u8; ETH_MIN];
        f[0..6].copy_from_slice(&to);
        f[6..12].copy_from_slice(&iface.mac);
        f[12..14].copy_from_slice(&HELLO_ETHERTYPE.to_be_bytes());
        let h = Hello { ask, ..self.me };
        f[ETH_HEADER..ETH_HEADER + HELLO_LEN].copy_from_slice(&h.emit(&self.key));
        // SAFETY: a valid socket and a buffer of the given length.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                f.as_ptr() as *const libc::c_void,
                f.len(),
                libc::MSG_DONTWAIT,
            )
        };
        n == f.len() as isize
    }

    /// The next hello waiting on the socket: `None` when none is, `Some(Err(()))` for
    /// one that is not a valid hello of this job from the station it names.
    pub(super) fn next(&mut self) -> Option<Result<Hello, ()>> {
        // SAFETY: a valid socket and a buffer of the given length.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr() as *mut libc::c_void,
                self.buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return None;
        }
        let f = &self.buf[..n as usize];
        let ok = f.len() >= ETH_HEADER + HELLO_LEN && f[12..14] == HELLO_ETHERTYPE.to_be_bytes();
        let h = ok
            .then(|| Hello::parse(&f[ETH_HEADER..], &self.key))
            .flatten()
            // Bound to the station it came from, and of this job.
            .filter(|h| f[6..12] == h.mac && h.job_key == self.me.job_key && h.size == self.me.size)
            .filter(|h| h.rank < h.size && h.rank != self.me.rank);
        Some(h.ok_or(()))
    }
}

/// Finds every rank's MAC address by hellos (see the module documentation).
pub(super) fn discover(
    iface: &Interface,
    hellos: &mut Hellos,
    timeout: StdDuration,
) -> Result<Vec<[u8; 6]>, HostError> {
    let size = hellos.me.size as usize;
    let me = hellos.me.rank as usize;
    let mut macs: Vec<Option<[u8; 6]>> = vec![None; size];
    macs[me] = Some(iface.mac);
    let start = StdInstant::now();
    let mut last_ask: Option<StdInstant> = None;
    loop {
        if macs.iter().all(Option::is_some) {
            break;
        }
        let now = StdInstant::now();
        if last_ask.is_none_or(|t| now - t >= HELLO_EVERY) {
            hellos.send(iface, [0xFF; 6], true);
            last_ask = Some(now);
        }
        let mut got = false;
        while let Some(h) = hellos.next() {
            got = true;
            let Ok(h) = h else { continue };
            let r = h.rank as usize;
            if let Some(j) = macs.iter().position(|m| *m == Some(h.mac)) {
                if j != r {
                    return Err(HostError::Fabric(format!(
                        "eth: ranks {j} and {r} both have MAC {} on {}: each rank needs its own interface",
                        mac_text(&h.mac),
                        iface.name
                    )));
                }
            }
            macs[r].get_or_insert(h.mac);
            if h.ask {
                hellos.send(iface, h.mac, false);
            }
        }
        if now - start > timeout {
            let missing: Vec<String> = (0..size)
                .filter(|&r| macs[r].is_none())
                .map(|r| r.to_string())
                .collect();
            return Err(HostError::Fabric(format!(
                "eth: no hello from rank {} on {} within {:.0} s: are they started, each on its own interface on this LAN, with this job's id and secret?",
                missing.join(", "),
                iface.name,
                timeout.as_secs_f64()
            )));
        }
        if !got {
            std::thread::sleep(StdDuration::from_micros(200));
        }
    }
    Ok(macs.into_iter().map(|m| m.unwrap_or_default()).collect())
}

// ------------------------------------------------------------------ rings
