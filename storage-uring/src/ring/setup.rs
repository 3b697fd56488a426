//! Creating a ring: probing which setup flags the kernel accepts, checking
//! the operations ringmq needs, and explaining why io_uring is unavailable
//! when it is.
//!
//! Flags are tried strongest first: `SINGLE_ISSUER | DEFER_TASKRUN |
//! COOP_TASKRUN | SUBMIT_ALL`, then without `DEFER_TASKRUN`, then
//! `COOP_TASKRUN` alone, then none. A kernel that does not know a flag answers
//! `EINVAL`, so `EINVAL` moves to the next set and any other errno is final.
//! `SQPOLL` is never used: it burns a core per ring on a 2-core machine, and
//! the shard loop already submits once per turn.
//!
//! # Invariants
//! - The [`SetupFlags`] returned are exactly the flags of the ring built.
//! - `DEFER_TASKRUN` is only ever requested together with `SINGLE_ISSUER`
//!   (the kernel requires it).

use std::io;

use io_uring::{IoUring, opcode};

use super::error::RingError;

/// The setup flags the kernel accepted for a ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetupFlags {
    /// `IORING_SETUP_SINGLE_ISSUER`: only the creating thread submits.
    pub single_issuer: bool,
    /// `IORING_SETUP_DEFER_TASKRUN`: completions are posted only when the
    /// owning thread enters the kernel to get events.
    pub defer_taskrun: bool,
    /// `IORING_SETUP_COOP_TASKRUN`: no inter-processor interrupt to post a
    /// completion.
    pub coop_taskrun: bool,
    /// `IORING_SETUP_SUBMIT_ALL`: a bad entry does not stop the rest of the
    /// batch from being submitted.
    pub submit_all: bool,
}

/// Candidate flag sets, strongest first.
const SETUP_CANDIDATES: [SetupFlags; 4] = [
    SetupFlags {
        single_issuer: true,
        defer_taskrun: true,
        coop_taskrun: true,
        submit_all: true,
    },
    SetupFlags {
        single_issuer: true,
        defer_taskrun: false,
        coop_taskrun: true,
        submit_all: true,
    },
    SetupFlags {
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: true,
        submit_all: false,
    },
    SetupFlags {
        single_issuer: false,
        defer_taskrun: false,
        coop_taskrun: false,
        submit_all: false,
    },
];

/// Operations the disk path cannot do without, with names for the error.
const REQUIRED_OPCODES: [(u8, &str); 7] = [
    (opcode::Read::CODE, "IORING_OP_READ"),
    (opcode::Write::CODE, "IORING_OP_WRITE"),
    (opcode::ReadFixed::CODE, "IORING_OP_READ_FIXED"),
    (opcode::WriteFixed::CODE, "IORING_OP_WRITE_FIXED"),
    (opcode::Fsync::CODE, "IORING_OP_FSYNC"),
    (opcode::Fallocate::CODE, "IORING_OP_FALLOCATE"),
    (opcode::AsyncCancel::CODE, "IORING_OP_ASYNC_CANCEL"),
];

/// Builds a ring of `entries` submission entries (completion queue twice as
/// large), with the strongest accepted flags.
///
/// # Errors
/// [`RingError::Unavailable`] with cause and fix when io_uring cannot be set
/// up; [`RingError::Unsupported`] when a needed operation or feature is missing.
pub(crate) fn build_ring(entries: u32) -> Result<(IoUring, SetupFlags), RingError> {
    let mut last_error = None;
    for flags in SETUP_CANDIDATES {
        let mut builder = IoUring::builder();
        builder.setup_cqsize(entries.saturating_mul(2));
        if flags.single_issuer {
            builder.setup_single_issuer();
        }
        if flags.defer_taskrun {
            builder.setup_defer_taskrun();
        }
        if flags.coop_taskrun {
            builder.setup_coop_taskrun();
        }
        if flags.submit_all {
            builder.setup_submit_all();
        }
        match builder.build(entries) {
            Ok(ring) => {
                check_support(&ring)?;
                return Ok((ring, flags));
            }
            Err(error) if error.raw_os_error() == Some(libc::EINVAL) => last_error = Some(error),
            Err(error) => return Err(unavailable(error)),
        }
    }
    Err(unavailable(
        last_error.expect("SETUP_CANDIDATES is not empty"),
    ))
}

fn check_support(ring: &IoUring) -> Result<(), RingError> {
    if !ring.params().is_feature_ext_arg() {
        return Err(RingError::Unsupported {
            what: "IORING_FEAT_EXT_ARG (wait with timeout)",
        });
    }
    if !ring.params().is_feature_nodrop() {
        return Err(RingError::Unsupported {
            what: "IORING_FEAT_NODROP",
        });
    }
    let mut probe = io_uring::Probe::new();
    ring.submitter()
        .register_probe(&mut probe)
        .map_err(|_| RingError::Unsupported {
            what: "IORING_REGISTER_PROBE",
        })?;
    for (code, what) in REQUIRED_OPCODES {
        if !probe.is_supported(code) {
            return Err(RingError::Unsupported { what });
        }
    }
    Ok(())
}

fn unavailable(source: io::Error) -> RingError {
    let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled").ok();
    let (cause, fix) = diagnose_setup_error(source.raw_os_error(), sysctl.as_deref());
    RingError::Unavailable { cause, fix, source }
}

/// Explains an `io_uring_setup` failure: `(cause, fix)`. `sysctl` is the
/// content of `/proc/sys/kernel/io_uring_disabled`, if readable.
pub(crate) fn diagnose_setup_error(
    errno: Option<i32>,
    sysctl: Option<&str>,
) -> (String, &'static str) {
    let disabled = sysctl.map(str::trim);
    match errno {
        Some(libc::ENOSYS) => (
            "the kernel has no io_uring (built without CONFIG_IO_URING, or older than 5.1)".into(),
            "run on Linux 6.1 or later with io_uring enabled",
        ),
        Some(libc::EPERM) if disabled == Some("2") => (
            "io_uring is disabled system-wide (sysctl kernel.io_uring_disabled = 2)".into(),
            "set `sysctl -w kernel.io_uring_disabled=0`",
        ),
        Some(libc::EPERM) if disabled == Some("1") => (
            "io_uring is restricted to the group in kernel.io_uring_group \
             (sysctl kernel.io_uring_disabled = 1)"
                .into(),
            "add the broker's user to kernel.io_uring_group, or set \
             `sysctl -w kernel.io_uring_disabled=0`",
        ),
        Some(libc::EPERM) => (
            "io_uring_setup was refused with EPERM, most likely by a seccomp filter \
             (container runtimes block io_uring by default)"
                .into(),
            "run with a seccomp profile that allows io_uring_setup, io_uring_enter and \
             io_uring_register (for example docker/podman --security-opt seccomp=<profile>)",
        ),
        Some(libc::ENOMEM) => (
            "the kernel could not allocate or lock memory for the ring".into(),
            "raise the locked-memory limit (`ulimit -l`, LimitMEMLOCK=) or use a smaller ring",
        ),
        Some(libc::EMFILE) | Some(libc::ENFILE) => (
            "no file descriptor is left for the ring".into(),
            "raise the open-files limit (`ulimit -n`, LimitNOFILE=)",
        ),
        Some(libc::EINVAL) => (
            "the kernel rejected every setup flag combination, even none".into(),
            "run on Linux 6.1 or later",
        ),
        _ => ("io_uring_setup failed".into(), "see the errno below"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnose_names_seccomp_for_eperm_when_sysctl_allows() {
        let (cause, fix) = diagnose_setup_error(Some(libc::EPERM), Some("0\n"));
        assert!(cause.contains("seccomp"), "{cause}");
        assert!(fix.contains("seccomp"), "{fix}");
    }

    #[test]
    fn diagnose_names_the_sysctl_when_it_disables_io_uring() {
        let (cause, fix) = diagnose_setup_error(Some(libc::EPERM), Some("2\n"));
        assert!(cause.contains("io_uring_disabled = 2"), "{cause}");
        assert!(fix.contains("io_uring_disabled=0"), "{fix}");
        let (cause, _) = diagnose_setup_error(Some(libc::EPERM), Some("1"));
        assert!(cause.contains("io_uring_group"), "{cause}");
    }

    #[test]
    fn diagnose_names_the_kernel_for_enosys() {
        let (cause, fix) = diagnose_setup_error(Some(libc::ENOSYS), None);
        assert!(cause.contains("no io_uring"), "{cause}");
        assert!(fix.contains("Linux 6.1"), "{fix}");
    }

    #[test]
    fn defer_taskrun_is_only_requested_with_single_issuer() {
        for flags in SETUP_CANDIDATES {
            assert!(!flags.defer_taskrun || flags.single_issuer, "{flags:?}");
        }
    }
}
