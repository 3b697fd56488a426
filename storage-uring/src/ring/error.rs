//! Errors of the reactor itself (setup, registration, submission), as
//! opposed to the errors of individual operations, which arrive in their
//! completions as `io::Error`s.
//!
//! # Invariants
//! - Every variant that comes from the kernel keeps the errno as its
//!   `#[source]`.
//! - The two errors an operator can fix (io_uring unavailable, registered
//!   buffers refused) name both the cause and the remedy in their message.

use std::io;

/// An error of the ring (not of one operation).
#[derive(Debug, thiserror::Error)]
pub enum RingError {
    /// io_uring cannot be used in this process at all.
    #[error("io_uring is unavailable: {cause}; fix: {fix}")]
    Unavailable {
        /// What stops it, as far as can be told from here.
        cause: String,
        /// What an operator can do about it.
        fix: &'static str,
        /// The errno of `io_uring_setup`.
        #[source]
        source: io::Error,
    },
    /// The kernel has io_uring but lacks an operation or feature ringmq needs.
    #[error("this kernel's io_uring lacks {what}; fix: run on Linux 6.1 or later")]
    Unsupported {
        /// The missing operation or feature.
        what: &'static str,
    },
    /// Registering fixed buffers was refused for lack of lockable memory.
    #[error(
        "registering {count} io_uring buffers ({bytes} bytes) was refused: the locked-memory limit \
         (RLIMIT_MEMLOCK) is {limit}; fix: raise it (`ulimit -l`, or LimitMEMLOCK= in the systemd \
         unit), or configure fewer or smaller registered buffers (writes then fall back to \
         unregistered buffers)"
    )]
    BuffersRefused {
        /// Buffers in the refused registration.
        count: usize,
        /// Their total size.
        bytes: usize,
        /// The soft RLIMIT_MEMLOCK, rendered ("8388608 bytes", "unlimited").
        limit: String,
        /// The errno (ENOMEM).
        #[source]
        source: io::Error,
    },
    /// Registering fixed buffers failed for another reason.
    #[error("registering {count} io_uring buffers failed: {source}")]
    Register {
        /// Buffers in the failed registration.
        count: usize,
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// Registering an eventfd for completion notification failed.
    #[error("registering an eventfd with an io_uring ring failed: {source}")]
    RegisterEventfd {
        /// The errno.
        #[source]
        source: io::Error,
    },
    /// Buffers are already registered with this ring (one table per ring).
    #[error("this ring already has a registered buffer table")]
    AlreadyRegistered,
    /// The submission queue (or the in-flight table) is full.
    #[error("io_uring submission queue full ({capacity} operations in flight)")]
    QueueFull {
        /// Most operations in flight at once.
        capacity: usize,
    },
    /// The timer table is full.
    #[error("timer table full ({max} timers)")]
    TimersFull {
        /// Most timers at once.
        max: usize,
    },
    /// A lane of a shared ring could not be opened (its owner tag is taken,
    /// or its quota does not fit what the other lanes left).
    #[error("opening a lane of the shared ring: {reason}")]
    Lane {
        /// What did not fit.
        reason: String,
    },
    /// `io_uring_enter` failed with an errno that is not part of normal flow.
    #[error("io_uring_enter failed: {source}")]
    Enter {
        /// The errno.
        #[source]
        source: io::Error,
    },
}

impl RingError {
    /// The errno, when the error carries one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            RingError::Unavailable { source, .. }
            | RingError::BuffersRefused { source, .. }
            | RingError::Register { source, .. }
            | RingError::RegisterEventfd { source }
            | RingError::Enter { source } => source.raw_os_error(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_refused_names_the_limit_and_both_remedies() {
        let error = RingError::BuffersRefused {
            count: 4,
            bytes: 32 << 20,
            limit: "8388608 bytes".to_string(),
            source: io::Error::from_raw_os_error(libc::ENOMEM),
        };
        let text = error.to_string();
        assert!(text.contains("RLIMIT_MEMLOCK"), "{text}");
        assert!(text.contains("ulimit -l"), "{text}");
        assert!(text.contains("LimitMEMLOCK"), "{text}");
        assert!(text.contains("fewer or smaller"), "{text}");
        assert_eq!(error.raw_os_error(), Some(libc::ENOMEM));
    }
}
