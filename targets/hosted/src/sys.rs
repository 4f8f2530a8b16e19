//! The data path's socket calls, made as plain system calls.
//!
//! glibc's `sendto`, `recvfrom`, `sendmsg`, `recvmsg` and `send` are thread
//! cancellation points: in a process with more than one thread (every hosted
//! process has its beacon helper, [`crate::beacon`]) each call switches
//! asynchronous cancellation on and off around the system call, about 30
//! instructions more each (callgrind: 109 more per `udp` message, both ends).
//! Volley never cancels a thread, so these go straight to `syscall(2)`, which
//! sets `errno` alike. Arguments are the libc calls'; the result is theirs as an
//! `io::Result`.

use std::io;
use std::os::fd::RawFd;

fn cvt(r: libc::c_long) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// `recvfrom(2)`.
///
/// # Safety
///
/// `buf` must be writable for `len` bytes, and `addr`/`addr_len` null or valid as
/// recvfrom(2) requires, for the duration of the call.
pub(crate) unsafe fn recvfrom(
    fd: RawFd,
    buf: *mut libc::c_void,
    len: usize,
    flags: libc::c_int,
    addr: *mut libc::sockaddr,
    addr_len: *mut libc::socklen_t,
) -> io::Result<usize> {
    // SAFETY: the caller's guarantees are recvfrom(2)'s.
    cvt(unsafe { libc::syscall(libc::SYS_recvfrom, fd, buf, len, flags, addr, addr_len) })
}

/// `sendto(2)`.
///
/// # Safety
///
/// `buf` must be readable for `len` bytes, and `addr` null or valid for `addr_len`
/// bytes, for the duration of the call.
pub(crate) unsafe fn sendto(
    fd: RawFd,
    buf: *const libc::c_void,
    len: usize,
    flags: libc::c_int,
    addr: *const libc::sockaddr,
    addr_len: libc::socklen_t,
) -> io::Result<usize> {
    // SAFETY: the caller's guarantees are sendto(2)'s.
    cvt(unsafe { libc::syscall(libc::SYS_sendto, fd, buf, len, flags, addr, addr_len) })
}

/// `sendmsg(2)`.
///
/// # Safety
///
/// `msg` must point at a valid `msghdr` whose buffers are readable for the
/// duration of the call.
pub(crate) unsafe fn sendmsg(
    fd: RawFd,
    msg: *const libc::msghdr,
    flags: libc::c_int,
) -> io::Result<usize> {
    // SAFETY: the caller's guarantees are sendmsg(2)'s.
    cvt(unsafe { libc::syscall(libc::SYS_sendmsg, fd, msg, flags) })
}

/// `recvmsg(2)`.
///
/// # Safety
///
/// `msg` must point at a valid `msghdr` whose buffers are writable for the
/// duration of the call.
pub(crate) unsafe fn recvmsg(
    fd: RawFd,
    msg: *mut libc::msghdr,
    flags: libc::c_int,
) -> io::Result<usize> {
    // SAFETY: the caller's guarantees are recvmsg(2)'s.
    cvt(unsafe { libc::syscall(libc::SYS_recvmsg, fd, msg, flags) })
}

/// An empty `send(2)`: tells the kernel to walk a socket's transmit ring (a
/// packet ring, an `AF_XDP` ring).
pub(crate) fn kick(fd: RawFd) -> io::Result<usize> {
    // SAFETY: no buffer and no address: nothing is read.
    unsafe {
        sendto(
            fd,
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    }
}

/// `sendto(2)` of `buf` to `to`.
pub(crate) fn send_to(fd: RawFd, buf: &[u8], to: &socket2::SockAddr) -> io::Result<usize> {
    // SAFETY: `buf` and the address are live for the call and only read.
    unsafe {
        sendto(
            fd,
            buf.as_ptr() as *const libc::c_void,
            buf.len(),
            libc::MSG_DONTWAIT,
            to.as_ptr(),
            to.len(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn datagrams_go_and_come_and_errors_keep_their_errno() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        b.set_nonblocking(true).unwrap();
        let to = socket2::SockAddr::from(b.local_addr().unwrap());
        assert_eq!(send_to(a.as_raw_fd(), b"volley", &to).unwrap(), 6);
        let mut buf = [0u8; 16];
        let mut got = Err(io::ErrorKind::WouldBlock.into());
        for _ in 0..1000 {
            // SAFETY: `buf` is writable; no address wanted.
            got = unsafe {
                recvfrom(
                    b.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                )
            };
            if got.is_ok() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got.unwrap(), 6);
        assert_eq!(&buf[..6], b"volley");
        // Nothing more: EAGAIN, as the libc call says it.
        // SAFETY: as above.
        let e = unsafe {
            recvfrom(
                b.as_raw_fd(),
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        }
        .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(
            send_to(-1, b"x", &to).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }
}
