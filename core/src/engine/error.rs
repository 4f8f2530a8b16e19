//! Why an engine call or operation failed.

/// Errors of engine calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Port number outside the port table.
    InvalidPort,
    /// The port is reserved for collectives.
    ReservedPort,
    /// The port has no destination bound for output.
    NotBound,
    /// A port cannot be connected to itself for output.
    SelfConnect,
    /// Semaphore number outside the table or reserved.
    InvalidSemaphore,
    /// The destination group is not in the group table.
    UnknownGroup,
    /// The destination instance is not in its group.
    UnknownNode,
    /// A table (send operations, channels, assemblies) is full: try again later.
    NoResources,
    /// The handle does not name a live send operation.
    InvalidHandle,
    /// The first piece of a two-piece send is longer than [`INLINE_HEAD_MAX`](super::INLINE_HEAD_MAX).
    FirstPieceTooLong,
    /// The message is longer than the wire can describe (4 GiB).
    MessageTooLong,
    /// The send failed: the peer stopped answering.
    SendFailure,
    /// `attach_buffer` with a buffer shorter than the port's buffer size.
    BufferTooSmall,
    /// A message is being stored into the port's buffer right now.
    PortBusy,
    /// A barrier is already running.
    BarrierInProgress,
    /// The configuration contradicts itself (e.g. this node is not in its group).
    BadConfig,
    /// A deadline passed first.
    Timeout,
    /// The receiver discarded the message: its destination port was not bound for
    /// input within [`Config::unbound_grace`](super::Config::unbound_grace), or is reserved.
    PortClosed,
    /// The call may not be made from inside a handler (it would wait for the poll
    /// that is running the handler).
    InHandler,
    /// Counter number outside the counters an endpoint serves.
    InvalidCounter,
    /// The address range is not memory its owner lets peers reach.
    BadAddress,
    /// The destination process has left the job (it said goodbye on its way out:
    /// [`Engine::say_goodbye`](super::Engine::say_goodbye)); nothing sent to it can arrive.
    PeerLeft,
    /// Longer than the most this call takes, in bytes (a handler's send: 16 KiB;
    /// a packet: its size; an invocation: its limit).
    LongerThan(usize),
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::InvalidPort => "port number out of range",
            Error::ReservedPort => "port reserved for collective operations",
            Error::NotBound => "port has no destination",
            Error::SelfConnect => "a port cannot send to itself",
            Error::InvalidSemaphore => "semaphore number out of range or reserved",
            Error::UnknownGroup => "unknown destination group",
            Error::UnknownNode => "destination instance not in its group",
            Error::NoResources => "table full, try again later",
            Error::InvalidHandle => "no such send operation",
            Error::FirstPieceTooLong => "first piece longer than 20 bytes",
            Error::MessageTooLong => "message longer than 4 GiB",
            Error::SendFailure => "send failed: peer not answering",
            Error::BufferTooSmall => "buffer shorter than the port's buffer size",
            Error::PortBusy => "a message is being stored into this port",
            Error::BarrierInProgress => "a barrier is already running",
            Error::BadConfig => "inconsistent configuration",
            Error::Timeout => "deadline passed",
            Error::PortClosed => "destination port not bound for input at the receiver",
            Error::InHandler => "not allowed inside a handler",
            Error::InvalidCounter => "no such counter",
            Error::BadAddress => "address not in memory its owner exposes",
            Error::PeerLeft => "the destination process has left the job",
            Error::LongerThan(max) => {
                return write!(f, "longer than {max} bytes, the most this call takes");
            }
        })
    }
}

impl core::error::Error for Error {}
