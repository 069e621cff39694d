//! The OS calls the bench needs that std does not offer: raising `RLIMIT_NOFILE`, sending
//! `SIGTERM`, and the clock tick rate `/proc/PID/stat` counts CPU time in. This is the only
//! module allowed `unsafe`, and only for those calls.
#![allow(unsafe_code)]

use std::io;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit. Returns the new soft limit.
pub(crate) fn raise_nofile_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` writes into the `rlimit` we own and pass by valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: `setrlimit` only reads the `rlimit` we pass by valid pointer.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // `rlim_t` is `u64` on Linux but not on every Unix.
    #[allow(clippy::unnecessary_cast)]
    Ok(limit.rlim_cur as u64)
}

/// Sends `SIGTERM` to process `pid`.
pub(crate) fn terminate(pid: u32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "pid out of range"))?;
    if pid <= 0 {
        // 0 and negative pids address process groups; never do that by accident.
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "pid must be positive",
        ));
    }
    // SAFETY: `kill` takes plain integers and has no memory effects on this process.
    if unsafe { libc::kill(pid, libc::SIGTERM) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of `utime` and `stime` in
/// `/proc/PID/stat`.
pub(crate) fn clock_ticks_per_second() -> io::Result<u64> {
    // SAFETY: `sysconf` takes an integer and returns one; no memory is involved.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks <= 0 {
        return Err(io::Error::other("sysconf(_SC_CLK_TCK) failed"));
    }
    Ok(ticks as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_nofile_to_hard_limit() {
        let soft = raise_nofile_limit().expect("raise");
        assert!(soft > 0);
        // Idempotent.
        assert_eq!(raise_nofile_limit().expect("raise again"), soft);
    }

    #[test]
    fn clock_ticks() {
        // 100 on every Linux the bench runs on; anything positive is usable.
        assert!(clock_ticks_per_second().unwrap() > 0);
    }

    #[test]
    fn refuses_group_pids() {
        assert!(terminate(0).is_err());
        assert!(terminate(u32::MAX).is_err());
    }
}
