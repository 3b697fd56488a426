//! Pinning a shard's thread to one CPU (thread-per-core: each shard's ring
//! and files are used from one core only).

use std::io;

/// Pins the calling thread to the `index`-th CPU (modulo their number) of
/// its current affinity mask; returns that CPU's number.
///
/// # Errors
/// `sched_getaffinity` or `sched_setaffinity` failing, or an empty mask.
pub fn pin_to_cpu(index: usize) -> io::Result<usize> {
    // SAFETY: the cpu_set_t values are plain bit sets, zeroed before use;
    // pid 0 is the calling thread; the kernel reads or writes exactly
    // `size_of::<cpu_set_t>()` bytes of them.
    unsafe {
        let mut mask: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut mask) != 0 {
            return Err(io::Error::last_os_error());
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|cpu| libc::CPU_ISSET(*cpu, &mask))
            .collect();
        if cpus.is_empty() {
            return Err(io::Error::other("the thread's CPU affinity mask is empty"));
        }
        let cpu = cpus[index % cpus.len()];
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(cpu)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_thread_runs_on_the_one_cpu_it_was_given() {
        std::thread::spawn(|| {
            let cpu = pin_to_cpu(1).expect("pinning");
            // SAFETY: as in `pin_to_cpu`.
            let mask = unsafe {
                let mut mask: libc::cpu_set_t = std::mem::zeroed();
                assert_eq!(
                    libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut mask),
                    0
                );
                mask
            };
            let allowed: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
                // SAFETY: CPU_ISSET only reads the set, for a CPU below
                // CPU_SETSIZE.
                .filter(|c| unsafe { libc::CPU_ISSET(*c, &mask) })
                .collect();
            assert_eq!(allowed, vec![cpu]);
            // SAFETY: sched_getcpu takes no arguments.
            let running_on = unsafe { libc::sched_getcpu() };
            assert_eq!(usize::try_from(running_on).ok(), Some(cpu));
        })
        .join()
        .expect("the pinned thread");
    }
}
