//! Why a QNIX call or operation failed, and the number each cause returns.

use super::*;

/// Why a QNIX call or operation failed. The seed defines only "a negative number";
/// these are Volley's, one per cause, with [`QxError::code`] the number returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QxError {
    /// An argument is out of range or contradicts another.
    Invalid = -1,
    /// No free context, or the index names no context in use.
    NoContext = -2,
    /// The context already has an operation posted.
    Busy = -3,
    /// No registered process or formed group has that name.
    Unknown = -4,
    /// The process belongs to another application.
    OtherApplication = -5,
    /// The length exceeds what the operation allows.
    TooLong = -6,
    /// Physical addresses are not available on this platform or to this user.
    NoPhysical = -7,
    /// The memory is not mapped, not locked and translated, or not writable.
    Fault = -8,
    /// Memory could not be allocated or locked.
    NoMemory = -9,
    /// The peer stopped answering.
    Dead = -10,
    /// The message was longer than the receive buffer (the buffer holds its start).
    Truncated = -11,
    /// Registration did not complete in time.
    TimedOut = -12,
    /// `qx_init` has not succeeded, or `qx_end` was called.
    NotInitialized = -13,
    /// The name, group or buffer pool exists already.
    Exists = -14,
    /// A group size disagrees with the group's.
    Size = -15,
    /// The context was set up without a doorbell.
    NoDoorbell = -16,
    /// The network failed in a way not listed here.
    Network = -17,
}

impl QxError {
    /// How many errors there are: their codes are `-1..=-COUNT`.
    pub const COUNT: usize = 17;
    const ALL: [QxError; Self::COUNT] = [
        QxError::Invalid,
        QxError::NoContext,
        QxError::Busy,
        QxError::Unknown,
        QxError::OtherApplication,
        QxError::TooLong,
        QxError::NoPhysical,
        QxError::Fault,
        QxError::NoMemory,
        QxError::Dead,
        QxError::Truncated,
        QxError::TimedOut,
        QxError::NotInitialized,
        QxError::Exists,
        QxError::Size,
        QxError::NoDoorbell,
        QxError::Network,
    ];

    /// The negative number the C API returns.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The error a negative number stands for.
    pub fn from_code(code: i32) -> Option<QxError> {
        Self::ALL.iter().copied().find(|e| e.code() == code)
    }

    /// One line saying what went wrong.
    pub fn message(self) -> &'static str {
        match self {
            QxError::Invalid => "invalid argument",
            QxError::NoContext => "no such context (or none free)",
            QxError::Busy => "the context has an operation posted",
            QxError::Unknown => "no registered process or formed group by that name",
            QxError::OtherApplication => "the process belongs to another application",
            QxError::TooLong => "length above the operation's limit",
            QxError::NoPhysical => "physical addresses are not available here",
            QxError::Fault => "memory not mapped, not translated or not writable",
            QxError::NoMemory => "memory could not be allocated or locked",
            QxError::Dead => "the peer stopped answering",
            QxError::Truncated => "message longer than the receive buffer",
            QxError::TimedOut => "registration did not complete in time",
            QxError::NotInitialized => "qx_init has not succeeded (or qx_end was called)",
            QxError::Exists => "already registered or created",
            QxError::Size => "group size disagrees with the group's",
            QxError::NoDoorbell => "the context has no doorbell",
            QxError::Network => "network failure",
        }
    }
}

impl core::fmt::Display for QxError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.message())
    }
}

impl From<Error> for QxError {
    fn from(e: Error) -> Self {
        match e {
            Error::SendFailure => QxError::Dead,
            Error::BadAddress => QxError::Fault,
            Error::MessageTooLong | Error::LongerThan(_) => QxError::TooLong,
            Error::UnknownNode | Error::UnknownGroup => QxError::Unknown,
            Error::BadConfig => QxError::Invalid,
            Error::Timeout => QxError::TimedOut,
            _ => QxError::Network,
        }
    }
}
