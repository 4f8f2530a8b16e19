//! A GAMMA process on a hosted fabric.

use volley_core::engine::{Capacity, Config, Group, Members, Tree};
use volley_core::gamma::Gamma;
use volley_core::session::{HelloConfig, Session};

use crate::clock::HostClock;
use volley_core::phy::{
    Board, Capabilities, Device, Liveness, NicAtomics, NicBarrier, RxToken, SendPool, TxToken,
};
use volley_core::time::Instant;
use volley_core::NodeAddr;

use crate::bootstrap::Boot;
use crate::eth::{EthDevice, EthRx, EthTx};
use crate::shm::{ShmDevice, ShmOptions};
use crate::udp::{UdpDevice, UdpRx, UdpTx};
use crate::{Fabric, HostError};

/// Any fabric, as one device type.
#[derive(Debug)]
pub enum HostDevice {
    /// Shared memory.
    Shm(Box<ShmDevice>),
    /// UDP.
    Udp(Box<UdpDevice>),
    /// Raw Ethernet.
    Eth(Box<EthDevice>),
    /// Any of the above, every frame it sends and receives written to a capture
    /// file (`VOLLEY_PCAP`, see [`capture`]). Its board, send slots, NIC barrier and
    /// atomics are off, so that everything travels as frames the capture sees.
    Captured(Box<Captured>),
}

/// A device whose frames go to a pcap file (link type USER0, one Volley frame a
/// record, WIRE.md; `core/wireshark/volley.lua` dissects it). Its board, send
/// slots, NIC barrier and NIC atomics are off, so that what this rank sends travels
/// as frames the capture sees; other ranks' boards are still read.
#[derive(Debug)]
pub struct Captured {
    inner: HostDevice,
    file: std::fs::File,
    /// The first write error: the capture stops there, the job goes on.
    failed: bool,
    /// The frame on its way in or out.
    buf: Vec<u8>,
}

// Out of line and cold, here and in the tokens: the fabrics' own paths through
// `HostDevice` must stay as short as they are without a capture.
impl Captured {
    /// Records `frame`, unless an earlier write failed.
    fn record(file: &mut std::fs::File, failed: &mut bool, now: Instant, frame: &[u8]) {
        if !*failed && volley_core::phy::write_record(file, now, frame).is_err() {
            *failed = true;
        }
    }

    #[cold]
    #[inline(never)]
    fn session(&self) -> Option<(volley_core::wire::AuthKey, HelloConfig)> {
        self.inner.session()
    }

    #[cold]
    #[inline(never)]
    fn set_session(&mut self, s: (volley_core::wire::AuthKey, HelloConfig)) {
        self.inner.set_session(s)
    }

    #[cold]
    #[inline(never)]
    fn wakeup(&mut self) -> Result<&crate::wakeup::Wakeup, HostError> {
        self.inner.wakeup()
    }

    #[cold]
    #[inline(never)]
    fn arm_rx(&mut self) -> bool {
        self.inner.arm_rx()
    }

    #[cold]
    #[inline(never)]
    fn has_beacon(&self) -> bool {
        self.inner.has_beacon()
    }

    /// Every frame this rank sends goes through the capture: none on the board,
    /// none from send slots.
    #[cold]
    #[inline(never)]
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().frames_only()
    }

    #[cold]
    #[inline(never)]
    fn rx_pending(&self) -> bool {
        self.inner.rx_pending()
    }

    #[cold]
    #[inline(never)]
    fn flush(&mut self, now: Instant) {
        self.inner.flush(now)
    }

    #[cold]
    #[inline(never)]
    fn liveness(&mut self) -> Option<&mut dyn Liveness> {
        self.inner.liveness()
    }

    #[cold]
    #[inline(never)]
    fn board(&mut self) -> Option<&mut dyn Board> {
        self.inner.board()
    }

    /// The next frame, taken from the device into `buf` and recorded; the token
    /// lends it from there.
    #[cold]
    #[inline(never)]
    fn receive(&mut self, now: Instant) -> Option<UdpRx<'_>> {
        let tok = self.inner.receive(now)?;
        let source = tok.source();
        let buf = &mut self.buf;
        tok.consume_parts(|a, b| {
            buf.clear();
            buf.extend_from_slice(a);
            buf.extend_from_slice(b);
        });
        Self::record(&mut self.file, &mut self.failed, now, &self.buf);
        // A token as the udp device's: a frame in memory and its sender.
        Some(UdpRx::lent(&self.buf, source.map(|a| a.0)))
    }

    /// Room for a frame to `dst`, if the device has it now (asked again when the
    /// frame is written: nothing else reaches the device in between).
    #[cold]
    #[inline(never)]
    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<CapturedTx<'_>> {
        self.inner.transmit(now, dst)?;
        Some(CapturedTx {
            dev: self,
            dst,
            now,
        })
    }
}

/// `VOLLEY_PCAP=DIR`: wraps `dev` so that its frames are written to
/// `DIR/<job>-<rank>.pcap` (job in hex), a new file (never one already there, nor
/// through a link) that only this user can read. Unset: `dev` as it is.
pub fn capture(boot: &Boot, dev: HostDevice) -> Result<HostDevice, HostError> {
    use std::os::unix::fs::OpenOptionsExt;
    let Some(dir) = std::env::var_os("VOLLEY_PCAP") else {
        return Ok(dev);
    };
    let path = std::path::Path::new(&dir).join(format!("{:016x}-{}.pcap", boot.job, boot.rank));
    let bad =
        |e: std::io::Error| HostError::Setting(format!("VOLLEY_PCAP: {}: {e}", path.display()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(bad)?;
    volley_core::phy::write_header(&mut file).map_err(bad)?;
    Ok(HostDevice::Captured(Box::new(Captured {
        inner: dev,
        file,
        failed: false,
        buf: Vec::new(),
    })))
}

/// Room for a frame on a captured device: written into the capture's buffer,
/// recorded, then copied into the device.
#[derive(Debug)]
pub struct CapturedTx<'a> {
    dev: &'a mut Captured,
    dst: NodeAddr,
    now: Instant,
}

impl CapturedTx<'_> {
    /// Inline, so that the engine's closure is not built in memory for this
    /// rare path (which would slow every fabric's send); the rest out of line.
    #[inline(always)]
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let r = f(self.dev.room(len));
        self.dev.sent(self.now, self.dst);
        r
    }
}

impl Captured {
    /// `len` zeroed bytes in `buf`, for a frame to be written.
    #[cold]
    #[inline(never)]
    fn room(&mut self, len: usize) -> &mut [u8] {
        self.buf.clear();
        self.buf.resize(len, 0);
        &mut self.buf
    }

    /// A frame given in parts: joined, recorded, sent as one.
    #[cold]
    #[inline(never)]
    fn transmit_parts(&mut self, now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if self.inner.transmit(now, dst).is_none() || len > self.inner.capabilities().mtu {
            return false;
        }
        self.buf.clear();
        for p in parts {
            self.buf.extend_from_slice(p);
        }
        self.sent(now, dst);
        true
    }

    /// Records the frame in `buf` and sends it to `dst`.
    #[cold]
    #[inline(never)]
    fn sent(&mut self, now: Instant, dst: NodeAddr) {
        Self::record(&mut self.file, &mut self.failed, now, &self.buf);
        write_through(&mut self.inner, now, dst, &self.buf);
    }
}

/// [`Device::gather_from`] of a captured device.
const CAPTURED_GATHER_FROM: usize = 8192;

/// Sends `frame` on `dev`, where `CapturedTx::transmit` found room and nothing
/// has reached the device since. Not generic: a closure of a generic function
/// would make `HostTx::consume` instantiate itself without end.
fn write_through(dev: &mut HostDevice, now: Instant, dst: NodeAddr, frame: &[u8]) {
    if let Some(tok) = dev.transmit(now, dst) {
        tok.consume(frame.len(), |b| b.copy_from_slice(frame));
    }
}

impl HostDevice {
    /// The fabric's own device: this one, or the one a capture wraps.
    pub fn fabric_device(&self) -> &HostDevice {
        match self {
            HostDevice::Captured(c) => &c.inner,
            d => d,
        }
    }

    /// This run's frame key and what answers late HELLOs, once the start-up
    /// exchange is through ([`start_session`]); `None` on `shm` or before.
    pub fn session(&self) -> Option<(volley_core::wire::AuthKey, HelloConfig)> {
        match self {
            HostDevice::Shm(_) => None,
            HostDevice::Udp(d) => d.session,
            HostDevice::Eth(d) => d.session,
            HostDevice::Captured(c) => c.session(),
        }
    }

    fn set_session(&mut self, s: (volley_core::wire::AuthKey, HelloConfig)) {
        match self {
            HostDevice::Shm(_) => {}
            HostDevice::Udp(d) => d.session = Some(s),
            HostDevice::Eth(d) => d.session = Some(s),
            HostDevice::Captured(c) => c.set_session(s),
        }
    }

    /// The wake-up descriptor ([`crate::wakeup`]), made at the first call.
    pub fn wakeup(&mut self) -> Result<&crate::wakeup::Wakeup, HostError> {
        match self {
            HostDevice::Shm(d) => d.wakeup(),
            HostDevice::Udp(d) => d.wakeup(),
            HostDevice::Eth(d) => d.wakeup(),
            HostDevice::Captured(c) => c.wakeup(),
        }
    }

    /// Prepares the device for its program to sleep on the wake-up descriptor:
    /// `false` when a frame waits already (poll first).
    pub fn arm_rx(&mut self) -> bool {
        match self {
            HostDevice::Shm(d) => d.arm_rx(),
            HostDevice::Udp(d) => d.arm_rx(),
            HostDevice::Eth(d) => d.arm_rx(),
            HostDevice::Captured(c) => c.arm_rx(),
        }
    }

    /// Whether this process's beacon helper runs ([`crate::beacon`]).
    pub fn has_beacon(&self) -> bool {
        match self {
            HostDevice::Shm(d) => d.has_beacon(),
            HostDevice::Udp(d) => d.has_beacon(),
            HostDevice::Eth(d) => d.has_beacon(),
            HostDevice::Captured(c) => c.has_beacon(),
        }
    }
}

/// A received frame from any fabric.
#[derive(Debug)]
pub enum HostRx<'a> {
    /// From shared memory.
    Shm(volley_myri::MyriRx<'a>),
    /// From UDP.
    Udp(UdpRx<'a>),
    /// From a packet ring.
    Eth(EthRx<'a>),
}

/// Room for a frame on any fabric.
#[derive(Debug)]
pub enum HostTx<'a> {
    /// In a shared-memory ring.
    Shm(volley_myri::MyriTx<'a>),
    /// In a datagram.
    Udp(UdpTx<'a>),
    /// In a packet ring.
    Eth(EthTx<'a>),
    /// In a captured device.
    Captured(CapturedTx<'a>),
}

impl RxToken for HostRx<'_> {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        match self {
            HostRx::Shm(t) => t.consume(f),
            HostRx::Udp(t) => t.consume(f),
            HostRx::Eth(t) => t.consume(f),
        }
    }
    fn source(&self) -> Option<NodeAddr> {
        match self {
            HostRx::Shm(t) => t.source(),
            HostRx::Udp(t) => t.source(),
            HostRx::Eth(t) => t.source(),
        }
    }
    fn consume_parts<R, F: FnOnce(&[u8], &[u8]) -> R>(self, f: F) -> R {
        match self {
            HostRx::Shm(t) => t.consume_parts(f),
            HostRx::Udp(t) => t.consume_parts(f),
            HostRx::Eth(t) => t.consume_parts(f),
        }
    }
}

impl TxToken for HostTx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        match self {
            HostTx::Shm(t) => t.consume(len, f),
            HostTx::Udp(t) => t.consume(len, f),
            HostTx::Eth(t) => t.consume(len, f),
            HostTx::Captured(t) => t.consume(len, f),
        }
    }
}

impl Device for HostDevice {
    type RxToken<'a> = HostRx<'a>;
    type TxToken<'a> = HostTx<'a>;

    #[inline]
    fn receive(&mut self, now: Instant) -> Option<HostRx<'_>> {
        match self {
            HostDevice::Shm(d) => d.receive(now).map(HostRx::Shm),
            HostDevice::Udp(d) => d.receive(now).map(HostRx::Udp),
            HostDevice::Eth(d) => d.receive(now).map(HostRx::Eth),
            HostDevice::Captured(c) => c.receive(now).map(HostRx::Udp),
        }
    }

    // Always, down to the NIC model's slot: where a build holds all four
    // personalities (the `volley` command, libvolley), the inliner's budget
    // otherwise leaves one of these three calls on every send.
    #[inline(always)]
    fn transmit(&mut self, now: Instant, dst: NodeAddr) -> Option<HostTx<'_>> {
        match self {
            HostDevice::Shm(d) => d.transmit(now, dst).map(HostTx::Shm),
            HostDevice::Udp(d) => d.transmit(now, dst).map(HostTx::Udp),
            HostDevice::Eth(d) => d.transmit(now, dst).map(HostTx::Eth),
            HostDevice::Captured(c) => c.transmit(now, dst).map(HostTx::Captured),
        }
    }

    #[inline(always)]
    fn capabilities(&self) -> Capabilities {
        match self {
            HostDevice::Shm(d) => d.capabilities(),
            HostDevice::Udp(d) => d.capabilities(),
            HostDevice::Eth(d) => d.capabilities(),
            HostDevice::Captured(c) => c.capabilities(),
        }
    }

    #[inline(always)]
    fn transmit_reads_time(&self) -> bool {
        match self {
            HostDevice::Shm(d) => d.transmit_reads_time(),
            HostDevice::Udp(d) => d.transmit_reads_time(),
            HostDevice::Eth(d) => d.transmit_reads_time(),
            // A sent frame is stamped with the time of the poll that sent it. As the
            // fabrics', so that the send path sees one constant.
            HostDevice::Captured(_) => false,
        }
    }

    #[inline(always)]
    fn gather_from(&self) -> usize {
        match self {
            HostDevice::Eth(d) => d.gather_from(),
            HostDevice::Udp(d) => d.gather_from(),
            HostDevice::Shm(d) => d.gather_from(),
            // As `shm` and `eth`, so that the send path sees few constants; the
            // capture joins the parts (`transmit_parts`).
            HostDevice::Captured(_) => CAPTURED_GATHER_FROM,
        }
    }

    #[inline(always)]
    fn rx_pending(&self) -> bool {
        match self {
            HostDevice::Shm(d) => d.rx_pending(),
            HostDevice::Udp(d) => d.rx_pending(),
            HostDevice::Eth(d) => d.rx_pending(),
            HostDevice::Captured(c) => c.rx_pending(),
        }
    }

    #[inline(always)]
    fn flush(&mut self, now: Instant) {
        match self {
            HostDevice::Eth(d) => d.flush(now),
            HostDevice::Udp(d) => d.flush(now),
            HostDevice::Shm(_) => {}
            HostDevice::Captured(c) => c.flush(now),
        }
    }

    fn transmit_parts(&mut self, now: Instant, dst: NodeAddr, parts: &[&[u8]]) -> bool {
        match self {
            HostDevice::Eth(d) => d.transmit_parts(now, dst, parts),
            HostDevice::Udp(d) => d.transmit_parts(now, dst, parts),
            HostDevice::Shm(d) => d.transmit_parts(now, dst, parts),
            HostDevice::Captured(c) => c.transmit_parts(now, dst, parts),
        }
    }

    // The services: the NIC model's on `shm`; ICMP's liveness hint on `udp`.
    #[inline(always)]
    fn liveness(&mut self) -> Option<&mut dyn Liveness> {
        match self {
            HostDevice::Shm(d) => d.liveness(),
            HostDevice::Udp(d) => d.liveness(),
            HostDevice::Eth(d) => d.liveness(),
            HostDevice::Captured(c) => c.liveness(),
        }
    }

    #[inline(always)]
    fn nic_atomics(&mut self) -> Option<&mut dyn NicAtomics> {
        match self {
            HostDevice::Shm(d) => d.nic_atomics(),
            HostDevice::Udp(_) | HostDevice::Eth(_) | HostDevice::Captured(_) => None,
        }
    }

    #[inline(always)]
    fn nic_barrier(&mut self) -> Option<&mut dyn NicBarrier> {
        match self {
            HostDevice::Shm(d) => d.nic_barrier(),
            HostDevice::Udp(_) | HostDevice::Eth(_) | HostDevice::Captured(_) => None,
        }
    }

    #[inline(always)]
    fn board(&mut self) -> Option<&mut dyn Board> {
        match self {
            HostDevice::Shm(d) => d.board(),
            // Other ranks' boards are read (not captured): one that stopped being
            // read would hold their boards full. This rank writes none.
            HostDevice::Captured(c) => c.board(),
            HostDevice::Udp(_) | HostDevice::Eth(_) => None,
        }
    }

    #[inline(always)]
    fn send_pool(&self) -> Option<&dyn SendPool> {
        match self {
            HostDevice::Shm(d) => d.send_pool(),
            HostDevice::Udp(_) | HostDevice::Eth(_) | HostDevice::Captured(_) => None,
        }
    }

    #[inline(always)]
    fn send_pool_mut(&mut self) -> Option<&mut dyn SendPool> {
        match self {
            HostDevice::Shm(d) => d.send_pool_mut(),
            HostDevice::Udp(_) | HostDevice::Eth(_) | HostDevice::Captured(_) => None,
        }
    }
}

/// A GAMMA process of a hosted job.
pub type HostGamma<S> = Gamma<'static, HostDevice, HostClock, S>;

/// Opens this rank's device on `fabric`.
pub fn open_device(boot: &Boot, fabric: Fabric) -> Result<HostDevice, HostError> {
    Ok(match fabric {
        Fabric::Shm => HostDevice::Shm(Box::new(ShmDevice::open(boot, shm_options()?)?)),
        Fabric::Udp => HostDevice::Udp(Box::new(UdpDevice::open(boot)?)),
        Fabric::Eth => {
            HostDevice::Eth(Box::new(EthDevice::open(boot, &secret_for(boot, fabric)?)?))
        }
    })
}

/// Default for `VOLLEY_PEER_TIMEOUT`: long enough for a debugger stop, swapping or
/// a busy node; a dead process on this machine is noticed at once anyway.
pub const PEER_TIMEOUT_SECS: f64 = 30.0;

/// How long a peer may stay silent before it is declared dead: `VOLLEY_PEER_TIMEOUT`
/// seconds (0.1 to 86400), 30 by default.
pub fn peer_timeout() -> Result<volley_core::time::Duration, HostError> {
    let d = crate::settings::env_seconds("VOLLEY_PEER_TIMEOUT", 0.1, 86_400.0)?
        .unwrap_or(std::time::Duration::from_secs_f64(PEER_TIMEOUT_SECS));
    Ok(volley_core::time::Duration::from_nanos(d.as_nanos() as u64))
}

/// `VOLLEY_BARRIER`: `device` (the default: in NIC memory on shm, once this rank's
/// sends have landed; frames elsewhere) or `frames` (the dissemination barrier
/// everywhere). Every rank must agree.
pub fn device_barrier() -> Result<bool, HostError> {
    match std::env::var("VOLLEY_BARRIER").as_deref() {
        Err(_) | Ok("device") => Ok(true),
        Ok("frames") => Ok(false),
        Ok(v) => Err(HostError::Setting(format!(
            "VOLLEY_BARRIER={v}: expected device or frames"
        ))),
    }
}

/// `VOLLEY_BCAST`: the tree a reliable broadcast travels down where no board
/// reaches the whole group (`udp`, `eth`; on `shm` a group smaller than the job),
/// `binomial` (the default), `binary`, `chain` (each member passes it to the next)
/// or `flat` (the root sends every copy). Every rank must agree.
pub fn bcast_tree() -> Result<Option<Tree>, HostError> {
    match std::env::var("VOLLEY_BCAST").as_deref() {
        Err(_) | Ok("binomial") => Ok(Some(Tree::Binomial)),
        Ok("binary") => Ok(Some(Tree::Binary)),
        Ok("chain") => Ok(Some(Tree::Chain)),
        Ok("flat") => Ok(None),
        Ok(v) => Err(HostError::Setting(format!(
            "VOLLEY_BCAST={v}: expected binomial, binary, chain or flat"
        ))),
    }
}

pub(crate) fn shm_options() -> Result<ShmOptions, HostError> {
    use crate::settings::{env_integer, env_seconds};
    let mut o = ShmOptions {
        peer_timeout: peer_timeout()?,
        ..ShmOptions::default()
    };
    if let Some(n) = env_integer("VOLLEY_SHM_SLOTS", 2, 1 << 16)? {
        if !n.is_power_of_two() {
            return Err(HostError::Setting(format!(
                "VOLLEY_SHM_SLOTS={n}: expected a power of two from 2 to 65536"
            )));
        }
        o.slots = n as u32;
    }
    if let Some(n) = env_integer("VOLLEY_SHM_SLOT_SIZE", 128, 1 << 20)? {
        if n % 64 != 0 {
            return Err(HostError::Setting(format!(
                "VOLLEY_SHM_SLOT_SIZE={n}: expected a multiple of 64 from 128 to 1048576"
            )));
        }
        o.slot_size = n as u32;
    }
    if let Some(t) = env_seconds("VOLLEY_STARTUP_TIMEOUT", 0.001, 86_400.0)? {
        o.startup_timeout = t;
    }
    o.copy = crate::stream_copy::CopyMode::from_env()?;
    Ok(o)
}

/// The process groups of a job: `VOLLEY_GROUPS` lists their sizes (`2,2`: ranks 0-1
/// form group 1, ranks 2-3 group 2); by default one group, id 1, of every rank.
pub fn groups(size: u16) -> Result<&'static [Group<'static>], HostError> {
    let sizes: Vec<u16> = match std::env::var("VOLLEY_GROUPS") {
        Ok(spec) => spec
            .split(',')
            .map(|s| {
                s.trim().parse::<u16>().map_err(|_| {
                    HostError::Setting(format!("VOLLEY_GROUPS={spec:?}: sizes expected"))
                })
            })
            .collect::<Result<_, _>>()?,
        Err(_) => vec![size],
    };
    if sizes.iter().map(|&s| s as u32).sum::<u32>() != size as u32 || sizes.contains(&0) {
        return Err(HostError::Setting(format!(
            "VOLLEY_GROUPS {sizes:?} does not add up to {size} ranks"
        )));
    }
    let mut first = 0u16;
    let groups: Vec<Group<'static>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &count)| {
            let g = Group {
                id: i as u16 + 1,
                members: Members::Range { first, count },
            };
            first += count;
            g
        })
        .collect();
    Ok(Vec::leak(groups))
}

/// The group holding fabric address `rank`, and the rank's instance number in it.
pub fn my_group(groups: &[Group<'_>], rank: u16) -> (u16, u16) {
    for g in groups {
        if let Members::Range { first, count } = g.members {
            if rank >= first && rank < first + count {
                return (g.id, rank - first);
            }
        }
    }
    (1, rank)
}

/// The engine settings of this rank: groups, job key, peer timeout and, on fabrics
/// others can write to, the frame key; then its device.
pub fn engine_setup(
    boot: &Boot,
    fabric: Fabric,
) -> Result<(&'static [Group<'static>], Config, HostDevice), HostError> {
    // In this order, so that each setting's error comes before the next one's.
    let groups = groups(boot.size)?;
    let mut dev = open_device(boot, fabric)?;
    let mut cfg = engine_config(boot, fabric, groups, &dev)?;
    start_session(boot, &mut dev, &mut cfg)?;
    start_beacon(&mut dev, &cfg, groups, boot.size);
    cfg.ack_exchange_ends = !dev.has_beacon();
    // After the start-up exchange: the capture holds the job's frames.
    let dev = capture(boot, dev)?;
    Ok((groups, cfg, dev))
}

/// Starts the beacon helper of a `udp` or `eth` device ([`crate::beacon`]) with
/// this rank's beacon frame to every other rank (`shm`'s beats from the open).
pub fn start_beacon(dev: &mut HostDevice, cfg: &Config, groups: &[Group<'_>], size: u16) {
    // Every other rank, by rank, and its name.
    let (ranks, names): (Vec<usize>, Vec<(u16, u16)>) = (0..size)
        .map(|r| (r as usize, my_group(groups, r)))
        .filter(|&(_, n)| n != (cfg.group, cfg.node))
        .unzip();
    let cfg = *cfg;
    let build: crate::beacon::BuildFrame = Box::new(move |i, count, f| {
        let Some(&(group, node)) = names.get(i) else {
            return;
        };
        f.resize(volley_core::engine::BEACON_LEN, 0);
        match volley_core::engine::beacon_frame(&cfg, group, node, count, f) {
            Ok(n) => f.truncate(n),
            Err(_) => f.clear(),
        }
    });
    let every = crate::beacon::frame_interval(cfg.peer_timeout);
    match dev {
        HostDevice::Shm(_) => {}
        HostDevice::Udp(d) => {
            d.start_beacon(&ranks, build, every);
        }
        HostDevice::Eth(d) => {
            d.start_beacon(&ranks, build, every);
        }
        // Wrapped after this (see `engine_setup`).
        HostDevice::Captured(_) => {}
    }
}

/// The engine settings of this rank in `groups` (see [`engine_setup`]), for a device
/// already open.
pub fn engine_config(
    boot: &Boot,
    fabric: Fabric,
    groups: &[Group<'_>],
    dev: &HostDevice,
) -> Result<Config, HostError> {
    let (group, node) = my_group(groups, boot.rank);
    let job_key = match &boot.secret {
        Some(s) => s.job_key(boot.job),
        None => (boot.job ^ (boot.job >> 32)) as u32,
    };
    crate::clock::check_setting()?;
    let mut cfg = Config::new(job_key, group, node);
    cfg.peer_timeout = peer_timeout()?;
    // A process whose beacon speaks for it while it computes need not ack the end
    // of a one-sided exchange at once (see `crate::beacon`).
    cfg.ack_exchange_ends = !dev.has_beacon();
    cfg.device_barrier = device_barrier()?;
    cfg.bcast_tree = bcast_tree()?;
    // Frames that cross a network are authenticated under the job secret; shared
    // memory is private to this user (and checked), and needs none.
    if fabric != Fabric::Shm {
        cfg.auth_key = Some(secret_for(boot, fabric)?.frame_key(boot.job));
        // This run's, where the device has been through the start-up exchange.
        if let Some((key, hello)) = dev.session() {
            (cfg.auth_key, cfg.hello) = (Some(key), Some(hello));
        }
        // Long tags hash twice as fast where the CPU multiplies two blocks at once.
        crate::clmul::install();
    }
    // The window the receive buffer or ring holds.
    match dev {
        HostDevice::Udp(d) => cfg.window = d.shape().window(),
        HostDevice::Eth(d) => {
            cfg.window = d.window();
            // A window of Ethernet-sized frames takes a receiver on a busy host longer
            // to authenticate than the default first timeout: 2 ms keeps the sender
            // from resending windows that are still being read.
            cfg.rto_initial = volley_core::time::Duration::from_millis(2);
        }
        HostDevice::Shm(_) | HostDevice::Captured(_) => {}
    }
    Ok(cfg)
}

/// The longest a rank sleeps in the start-up exchange between looks at its clock
/// and the limit.
const STARTUP_WAIT_MAX: std::time::Duration = std::time::Duration::from_millis(20);

/// Meets every other rank in the start-up exchange ([`volley_core::session`]) and
/// makes `cfg`'s frame key this run's, so that frames recorded from another run of
/// the job (the same key file and job id) never verify here; kept in `dev` for the
/// engines made on it later. Only where frames are authenticated (a key in `cfg`).
/// Waits for every rank at most `VOLLEY_STARTUP_TIMEOUT` seconds (30 by default),
/// then fails naming those that never answered with this run's nonce.
pub fn start_session(boot: &Boot, dev: &mut HostDevice, cfg: &mut Config) -> Result<(), HostError> {
    use volley_core::time::Clock;
    let Some(frame_key) = cfg.auth_key else {
        return Ok(());
    };
    if let Some((key, hello)) = dev.session() {
        (cfg.auth_key, cfg.hello) = (Some(key), Some(hello));
        return Ok(());
    }
    let nonce = crate::secret::Secret::generate()?.0;
    let mut s = Session::with_ranks(boot.rank, boot.size as usize, cfg.job_key, frame_key, nonce);
    let limit = crate::settings::env_seconds("VOLLEY_STARTUP_TIMEOUT", 0.001, 86_400.0)?
        .unwrap_or(std::time::Duration::from_secs(30));
    let clock = HostClock::default();
    let start = std::time::Instant::now();
    while !s.complete() {
        s.poll(clock.now(), dev);
        if start.elapsed() > limit {
            let missing: Vec<String> = s.waiting_for().map(|r| r.to_string()).collect();
            let st = s.stats();
            // Where the kernel refused the sends, that is the cause to name.
            let refused = match dev {
                HostDevice::Udp(d) if d.stats().tx_no_buffers > 0 => {
                    format!("; {}", crate::udp::no_buffers_hint(d.stats().tx_no_buffers))
                }
                _ => String::new(),
            };
            return Err(HostError::Fabric(format!(
                "start-up: rank {} gave no answer with this run's nonce within {:?} (VOLLEY_STARTUP_TIMEOUT; {} HELLOs sent, {} taken, {} with an earlier nonce, {} with a bad tag: frames of an earlier run are no answer){refused}",
                missing.join(", "),
                limit,
                st.sent,
                st.taken,
                st.stale_echo,
                st.bad_tag
            )));
        }
        // Asleep until a frame comes or a resend is due: ranks may outnumber the
        // host's cores, and a rank that spins here delays those it waits for.
        let due = s.poll_at().map(|t| t.saturating_since(clock.now()));
        let wait = due.map_or(STARTUP_WAIT_MAX, |d| {
            std::time::Duration::from_nanos(d.total_nanos()).min(STARTUP_WAIT_MAX)
        });
        if !wait.is_zero() && dev.arm_rx() {
            dev.wakeup()?.wait(Some(wait))?;
        }
    }
    let run = (s.run_key().unwrap_or(frame_key), s.hello_config());
    dev.set_session(run);
    (cfg.auth_key, cfg.hello) = (Some(run.0), Some(run.1));
    Ok(())
}

/// The job secret, which fabrics that cross a network cannot do without.
fn secret_for(boot: &Boot, fabric: Fabric) -> Result<crate::secret::Secret, HostError> {
    boot.secret.ok_or_else(|| {
        HostError::Fabric(format!(
            "the {} fabric needs a job secret: start under `volley run` or mpiexec, or set VOLLEY_KEY_FILE to a 0600 file of 32 hex digits",
            fabric.name()
        ))
    })
}

/// Eager buffers of a hosted GAMMA rank (16 KiB each).
pub const HOSTED_EAGER: usize = 256;

/// `gamma_init` for this rank: bootstrap, fabric, groups.
pub fn gamma<S>(boot: &Boot, fabric: Fabric, state: S) -> Result<HostGamma<S>, HostError> {
    let (groups, cfg, dev) = engine_setup(boot, fabric)?;
    // 256 eager buffers (4 MiB): relays hold a whole 1 MiB broadcast, which then
    // goes down the tree up to 16 ranks instead of from the root to each member.
    // An operation per buffer on top: eager sends that wait on a slow or dead peer
    // run out of buffers (and block) before they run out of operations (an error).
    let base = Gamma::<HostDevice, HostClock, S>::capacity(boot.size as usize);
    let cap = Capacity {
        eager: HOSTED_EAGER,
        ops: base.ops + HOSTED_EAGER,
        ..base
    };
    let mut g = Gamma::init_alloc_with(cfg, groups, cap, dev, HostClock::default(), state)?;
    // Ranks may outnumber cores: a rank with nothing to do lets another run.
    g.set_idle(Some(std::thread::yield_now));
    Ok(g)
}
