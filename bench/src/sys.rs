//! The two OS calls the bench needs that std does not offer: raising `RLIMIT_NOFILE` and
//! sending `SIGTERM`. This is the only module allowed `unsafe`, and only for those two calls.
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
    fn refuses_group_pids() {
        assert!(terminate(0).is_err());
        assert!(terminate(u32::MAX).is_err());
    }
}
