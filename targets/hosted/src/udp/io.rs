//! The socket calls: segmented sends (GSO), coalesced receives (GRO) and plain
//! ones, and the frames inside a datagram.

use super::*;

/// Counts `n` datagrams sent with one `sendto` or `sendmsg`.
pub(super) fn count_send(
    sent: std::io::Result<usize>,
    n: u64,
    sock: &UdpSocket,
    life: &mut Liveness,
    stats: &mut UdpStats,
) {
    match sent {
        Ok(_) => stats.tx += n,
        Err(e) => {
            stats.tx_errors += n;
            if e.raw_os_error() == Some(libc::ENOBUFS) {
                no_buffers(stats, n);
            }
            // A pending ICMP error is reported by whichever call comes first: read
            // it now, before any later datagram makes its peer "heard".
            if e.kind() == ErrorKind::ConnectionRefused {
                life.read_errors(sock, stats);
            }
        }
    }
}

/// `sendmsg` of `buf` to `to` as datagrams of `seg` bytes (`UDP_SEGMENT`).
pub(super) fn send_segmented(
    sock: &UdpSocket,
    addr: &socket2::SockAddr,
    buf: &[u8],
    seg: u16,
) -> std::io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // Room for one control message of a u16, 8-byte aligned.
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid (no address, no control data yet).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = addr.as_ptr() as *mut libc::c_void;
    msg.msg_namelen = addr.len();
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    // SAFETY: CMSG_SPACE only computes a size.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
    debug_assert!(msg.msg_controllen <= std::mem::size_of_val(&control));
    // SAFETY: `msg` has a control buffer of `msg_controllen` (<= 32) bytes, so the
    // first header exists and its data has room for the u16 written.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg);
    }
    // SAFETY: a valid socket; `msg` points at live buffers (address, one iovec over
    // `buf`, the control message) that the kernel only reads during the call.
    unsafe { crate::sys::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_DONTWAIT) }
}

/// Turns `UDP_GRO` on or off; `false` if the kernel refuses.
pub(super) fn set_gro(sock: &UdpSocket, on: bool) -> bool {
    crate::set_int(sock, libc::SOL_UDP, UDP_GRO, on.into())
}

/// One `recvmsg` on `sock` into `buf` with `flags` and room `control` for control
/// messages: bytes read, the sender (or, from the error queue, the address the
/// error is about) and the message's flags; `each` sees every control message as
/// (level, type, data).
pub(super) fn recv_msg(
    sock: &UdpSocket,
    buf: &mut [u8],
    control: &mut [u64],
    flags: libc::c_int,
    mut each: impl FnMut(libc::c_int, libc::c_int, &[u8]),
) -> std::io::Result<(usize, SocketAddr, libc::c_int)> {
    // SAFETY: zeroed plain C structs are valid; every pointer below points into
    // them, `buf` or `control`, which outlive the call.
    let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = &mut from as *mut libc::sockaddr_in as *mut libc::c_void;
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(control) as _;
    // SAFETY: a valid socket; `msg` points at live, writable buffers of the sizes it
    // gives (address, one iovec over `buf`, control), written only during the call.
    let r = unsafe { crate::sys::recvmsg(sock.as_raw_fd(), &mut msg, flags) }?;
    // SAFETY: walking the control buffer the kernel filled (`msg_controllen` bytes
    // of `control`) with its macros; each message's data ends where its length says.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let h = &*c;
            let data = libc::CMSG_DATA(c);
            let len =
                (h.cmsg_len as usize).saturating_sub(data.offset_from(c as *const u8) as usize);
            each(
                h.cmsg_level,
                h.cmsg_type,
                std::slice::from_raw_parts(data, len),
            );
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((r, v4(&from), msg.msg_flags))
}

/// One read into `buf`: bytes read, sender, and the size of the datagrams they are
/// made of (the `UDP_GRO` control message; the whole read without one).
pub(super) fn recv_coalesced(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, usize)> {
    let mut seg = 0;
    let mut control = [0u64; 4];
    let (n, from, flags) = recv_msg(
        sock,
        buf,
        &mut control,
        libc::MSG_DONTWAIT,
        |level, kind, d| {
            if level == libc::SOL_UDP && kind == UDP_GRO && d.len() >= 4 {
                seg = i32::from_ne_bytes([d[0], d[1], d[2], d[3]]).max(0) as usize;
            }
        },
    )?;
    if flags & libc::MSG_TRUNC != 0 {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "datagram truncated",
        ));
    }
    Ok((n, from, if seg == 0 { n } else { seg }))
}

/// The address the kernel wrote into `from`.
pub(super) fn v4(from: &libc::sockaddr_in) -> SocketAddr {
    let ip = std::net::Ipv4Addr::from(u32::from_be(from.sin_addr.s_addr));
    SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(from.sin_port)))
}

/// One `recvfrom` into `buf` (no control message: `UDP_GRO` is off): bytes read,
/// sender, and the size of the datagrams they are made of. That is the whole read,
/// unless a coalesced read queued while `UDP_GRO` was on comes after it was turned
/// off: then its first frame's header tells (see [`first_frame_len`]).
pub(super) fn recv_plain(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, usize)> {
    // SAFETY: a zeroed sockaddr_in is valid.
    let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a valid socket; `buf` and `from` are live and writable for the sizes
    // given, written only during the call. With MSG_TRUNC the result is the
    // datagram's whole length, which may exceed `buf`.
    let n = unsafe {
        crate::sys::recvfrom(
            sock.as_raw_fd(),
            buf.as_mut_ptr() as *mut libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            &mut from as *mut libc::sockaddr_in as *mut libc::sockaddr,
            &mut len,
        )
    }?;
    if n > buf.len() {
        return Err(std::io::Error::new(
            ErrorKind::InvalidData,
            "datagram truncated",
        ));
    }
    Ok((n, v4(&from), first_frame_len(&buf[..n])))
}

/// The length of the frame `d` starts with, by its header (payload length, and the
/// tag where the frame has one), where that is shorter than `d`: `d` then holds
/// datagrams of that size (the last may be shorter). Otherwise `d.len()`: one
/// datagram, which the engine judges as it is. Untrusted bytes: a wrong split only
/// cuts frames that fail their tag.
pub(super) fn first_frame_len(d: &[u8]) -> usize {
    use volley_core::wire::{Flags, Packet, HEADER_LEN, TAG_LEN, VERSION};
    // Not a frame under the full header (a start-up HELLO): one datagram.
    if d.first() != Some(&VERSION) {
        return d.len();
    }
    let Ok(p) = Packet::new_checked(d) else {
        return d.len();
    };
    let tag = if p.flags().contains(Flags::AUTH) {
        TAG_LEN
    } else {
        0
    };
    let n = HEADER_LEN + p.payload_len() as usize + tag;
    if n < d.len() {
        n
    } else {
        d.len()
    }
}

/// Sends the kernel refused for want of buffers (`ENOBUFS`) come from the
/// neighbour table, not the socket: a host that talks to more peers than the table
/// holds (`net.ipv4.neigh.default.gc_thresh3`, 1,024 by default, one table for
/// every network namespace of a machine) cannot reach those it has no entry for,
/// and its peers would later be declared dead for it. Said once, in one line.
pub(super) fn no_buffers(stats: &mut UdpStats, n: u64) {
    stats.tx_no_buffers += n;
    if stats.tx_no_buffers >= NO_BUFFERS_SAID && stats.tx_no_buffers - n < NO_BUFFERS_SAID {
        eprintln!("volley: {}", no_buffers_hint(stats.tx_no_buffers));
    }
}

/// After this many refusals, [`no_buffers`] says so.
const NO_BUFFERS_SAID: u64 = 1000;

/// What `n` refusals for want of buffers mean, in one line.
pub fn no_buffers_hint(n: u64) -> String {
    format!(
        "udp: the kernel refused {n} sends for want of buffers (ENOBUFS): its neighbour table is probably full; raise net.ipv4.neigh.default.gc_thresh3 (and gc_thresh2) above the number of peers on this machine"
    )
}
