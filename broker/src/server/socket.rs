//! The few socket calls io_uring does not make for us, through libc: the
//! listening socket (SO_REUSEPORT, so that every shard can listen on the
//! same port and the kernel spreads connections), the address of a peer,
//! TCP_NODELAY and `shutdown(2)`.
//!
//! Sockets stay blocking: io_uring tries each accept, recv and send without
//! blocking and arms its internal poll when the socket is not ready, so
//! O_NONBLOCK buys nothing and would only make the kernel spin on EAGAIN.
//!
//! # Invariants
//! - Every descriptor created here is close-on-exec and owned by an
//!   [`OwnedFd`] from the moment it exists, so no error path leaks one.
//! - `sockaddr` conversions read only the bytes the kernel reported.

use std::io;
use std::mem::size_of;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Pending connections the kernel queues before `accept` (Java's
/// `serverSocketBacklog` default is 1024).
pub const LISTEN_BACKLOG: i32 = 1024;

/// Creates a TCP socket bound to `addr` with SO_REUSEADDR and SO_REUSEPORT,
/// listening with [`LISTEN_BACKLOG`].
///
/// # Errors
/// The errno of `socket`, `setsockopt`, `bind` or `listen`.
pub fn bind_listener(addr: SocketAddr) -> io::Result<OwnedFd> {
    let fd = bound_socket(addr, true)?;
    // SAFETY: listen(2) takes no pointers.
    if unsafe { libc::listen(fd.as_raw_fd(), LISTEN_BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Fails with `AddrInUse` when a socket of this or another process already
/// listens on `addr`'s port.
///
/// [`bind_listener`]'s SO_REUSEPORT lets the shards of one broker share a
/// port, but it would also let a second broker (or name server) of the same
/// user join that group and silently take a share of the connections. A
/// socket without SO_REUSEPORT cannot join the group, so binding one and
/// closing it again tells whether the port is free, as the bind of Java's
/// broker would. Port 0 is always free.
///
/// # Errors
/// `AddrInUse` as above; the errno of `socket`, `setsockopt` or `bind`.
pub fn check_port_free(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    bound_socket(addr, false).map(drop)
}

/// A TCP socket with SO_REUSEADDR (and SO_REUSEPORT when `reuse_port`)
/// bound to `addr`.
fn bound_socket(addr: SocketAddr, reuse_port: bool) -> io::Result<OwnedFd> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket(2) takes no pointers; the result is checked.
    let raw = unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    set_int_option(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    if reuse_port {
        set_int_option(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    let (storage, len) = to_storage(addr);
    // SAFETY: `storage` is a live sockaddr_storage holding a sockaddr of
    // `len` bytes for the socket's family.
    let bound = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const storage).cast::<libc::sockaddr>(),
            len,
        )
    };
    if bound != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The local address of a socket (the port the kernel picked for port 0).
///
/// # Errors
/// The errno of `getsockname`, or `InvalidData` for an unknown family.
pub fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    address_of(fd, libc::getsockname)
}

/// The address of a connected socket's peer.
///
/// # Errors
/// The errno of `getpeername` (ENOTCONN when the peer is already gone), or
/// `InvalidData` for an unknown family.
pub fn peer_addr(fd: RawFd) -> io::Result<SocketAddr> {
    address_of(fd, libc::getpeername)
}

/// Disables Nagle's algorithm: responses are already batched per loop turn,
/// so waiting for more bytes only adds latency (Java's `NettyRemotingServer`
/// sets TCP_NODELAY on its child channels too).
///
/// # Errors
/// The errno of `setsockopt`.
pub fn set_nodelay(fd: RawFd) -> io::Result<()> {
    set_int_option(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)
}

/// `shutdown(fd, how)`: wakes every operation in flight on the socket (a
/// recv completes with 0, a send with EPIPE, an accept with EINVAL), which is
/// how the server ends them without a per-operation cancel.
///
/// # Errors
/// The errno of `shutdown` (ENOTCONN for a peer that is already gone is
/// normal and ignored by callers).
pub fn shutdown(fd: RawFd, how: i32) -> io::Result<()> {
    // SAFETY: shutdown(2) takes no pointers.
    if unsafe { libc::shutdown(fd, how) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

type NameCall = unsafe extern "C" fn(i32, *mut libc::sockaddr, *mut libc::socklen_t) -> i32;

fn address_of(fd: RawFd, call: NameCall) -> io::Result<SocketAddr> {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: `storage` and `len` are live locals; the kernel writes at most
    // `len` bytes into `storage` and the actual size into `len`.
    let done = unsafe { call(fd, (&raw mut storage).cast(), &mut len) };
    if done != 0 {
        return Err(io::Error::last_os_error());
    }
    from_storage(&storage, len as usize)
}

fn set_int_option(fd: RawFd, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: passes a pointer to a live i32 and its exact size.
    let done = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&raw const value).cast(),
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if done == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn to_storage(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(v4) => {
            // SAFETY: sockaddr_storage is larger than and aligned for
            // sockaddr_in (that is its purpose).
            let sin = unsafe { &mut *(&raw mut storage).cast::<libc::sockaddr_in>() };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = v4.port().to_be();
            sin.sin_addr.s_addr = u32::from(*v4.ip()).to_be();
            (storage, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(v6) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &mut *(&raw mut storage).cast::<libc::sockaddr_in6>() };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = v6.port().to_be();
            sin6.sin6_addr.s6_addr = v6.ip().octets();
            sin6.sin6_flowinfo = v6.flowinfo();
            sin6.sin6_scope_id = v6.scope_id();
            (storage, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

fn from_storage(storage: &libc::sockaddr_storage, len: usize) -> io::Result<SocketAddr> {
    match i32::from(storage.ss_family) {
        libc::AF_INET if len >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, and
            // the kernel wrote at least its size.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Ok(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Ok(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        family => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("socket address of family {family} ({len} bytes)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_listener_on_port_zero_reports_the_port_the_kernel_picked() {
        let fd = bind_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = local_addr(fd.as_raw_fd()).unwrap();
        assert_eq!(addr.ip(), Ipv4Addr::LOCALHOST);
        assert_ne!(addr.port(), 0);
        let stream = std::net::TcpStream::connect(addr).unwrap();
        assert_eq!(stream.peer_addr().unwrap(), addr);
    }

    #[test]
    fn two_listeners_share_a_port_through_so_reuseport() {
        let first = bind_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = local_addr(first.as_raw_fd()).unwrap();
        let second = bind_listener(addr).unwrap();
        assert_eq!(local_addr(second.as_raw_fd()).unwrap(), addr);
    }

    #[test]
    fn a_port_with_a_listener_is_not_free_and_frees_when_it_closes() {
        let first = bind_listener("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = local_addr(first.as_raw_fd()).unwrap();
        let error = check_port_free(addr).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse, "{error}");
        // Any address of the port counts, as for Java's bind.
        let any = SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), addr.port());
        let error = check_port_free(any).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AddrInUse, "{error}");
        drop(first);
        check_port_free(addr).unwrap();
        // The check holds nothing: the port can be listened on at once.
        let again = bind_listener(addr).unwrap();
        assert_eq!(local_addr(again.as_raw_fd()).unwrap(), addr);
        check_port_free("127.0.0.1:0".parse().unwrap()).unwrap();
    }

    #[test]
    fn socket_addresses_survive_the_sockaddr_round_trip() {
        for text in ["10.1.2.3:4567", "[fe80::1%3]:9876", "[::1]:1"] {
            let addr: SocketAddr = text.parse().unwrap();
            let (storage, len) = to_storage(addr);
            assert_eq!(
                from_storage(&storage, len as usize).unwrap(),
                addr,
                "{text}"
            );
        }
    }
}
