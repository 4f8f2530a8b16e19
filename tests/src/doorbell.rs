//! An ivshmem server for QEMU's `ivshmem-doorbell` device: Debian ships QEMU without
//! `ivshmem-server`, so the harness speaks its protocol itself (QEMU's
//! `docs/specs/ivshmem-spec.rst`). Every message is a little-endian `i64`, some with
//! one file descriptor (`SCM_RIGHTS`). A VM that connects gets the protocol version
//! (0), its id, the shared memory (`-1` with the region's fd), then one eventfd per
//! vector for each peer already there and for itself; the peers get its eventfds. A
//! write to a peer's eventfd raises that vector in the peer, which QEMU turns into an
//! MSI-X message.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Sends `value` (and `fd`, if any) as one message.
fn send(stream: &UnixStream, value: i64, fd: Option<RawFd>) -> std::io::Result<()> {
    let bytes = value.to_le_bytes();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // Room for one descriptor's control message, aligned for `cmsghdr`.
    let mut control = [0u64; 4];
    // SAFETY: an all-zero `msghdr` is valid (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        // SAFETY: CMSG_SPACE only computes a length.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        assert!(space <= std::mem::size_of_val(&control));
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space;
        // SAFETY: `msg` points at `control`, large enough for one header and one fd
        // (checked above), so the first header and its data lie inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut RawFd, fd);
        }
    }
    // SAFETY: `msg` and everything it points to live across the call.
    let n = unsafe { libc::sendmsg(stream.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n != bytes.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn eventfd() -> OwnedFd {
    // SAFETY: eventfd has no memory preconditions; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0, "eventfd: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

struct Peer {
    id: i64,
    stream: UnixStream,
    vectors: Vec<OwnedFd>,
}

/// Welcomes a new VM: version, id, memory, the others' eventfds, its own; and tells the
/// others about it.
fn welcome(peers: &mut Vec<Peer>, new: Peer, memory: RawFd) -> std::io::Result<()> {
    send(&new.stream, 0, None)?;
    send(&new.stream, new.id, None)?;
    send(&new.stream, -1, Some(memory))?;
    for p in peers.iter() {
        for v in &p.vectors {
            send(&new.stream, p.id, Some(v.as_raw_fd()))?;
        }
    }
    for v in &new.vectors {
        send(&new.stream, new.id, Some(v.as_raw_fd()))?;
    }
    for p in peers.iter() {
        for v in &new.vectors {
            // A peer that has gone away already is no reason to fail the new one.
            let _ = send(&p.stream, new.id, Some(v.as_raw_fd()));
        }
    }
    peers.push(new);
    Ok(())
}

/// A running ivshmem server over a region file; stops (and removes its socket) when
/// dropped.
#[derive(Debug)]
pub struct DoorbellServer {
    socket: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl DoorbellServer {
    /// Serves `region` (a file whose size is the region's) with `vectors` interrupt
    /// vectors per VM, on a socket in `dir` (a private directory).
    pub fn new(region: &Path, dir: &Path, vectors: usize) -> DoorbellServer {
        let memory = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(region)
            .expect("the region file");
        let socket = dir.join("ivshmem.sock");
        let listener = UnixListener::bind(&socket).expect("the server socket");
        listener.set_nonblocking(true).expect("non-blocking accept");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peers = Vec::new();
            let mut next = 0;
            // Bounded by the owner: `Drop` sets `stop`.
            while !stopped.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let _ = stream.set_nonblocking(false);
                        let peer = Peer {
                            id: next,
                            stream,
                            vectors: (0..vectors).map(|_| eventfd()).collect(),
                        };
                        next += 1;
                        if let Err(e) = welcome(&mut peers, peer, memory.as_raw_fd()) {
                            eprintln!("ivshmem server: a VM left during its welcome: {e}");
                        }
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        DoorbellServer {
            socket,
            stop,
            thread: Some(thread),
        }
    }

    /// QEMU arguments that give a node the served region as an `ivshmem-doorbell`
    /// device with one vector (`maxcpus=2` as for [`crate::SharedRegion::qemu_args`]).
    pub fn qemu_args(&self) -> Vec<String> {
        vec![
            "-smp".into(),
            "1,maxcpus=2".into(),
            "-chardev".into(),
            format!("socket,path={},id=ivsrv", self.socket.display()),
            "-device".into(),
            "ivshmem-doorbell,chardev=ivsrv,vectors=1".into(),
        ]
    }
}

impl Drop for DoorbellServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}
