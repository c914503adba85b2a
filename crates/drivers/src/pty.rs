//! Pseudo-terminals for `alloc exec -t`: the command gets the pty's slave as stdin, stdout and
//! stderr and as its controlling terminal; the caller reads and writes the master, and resizes
//! it when the user's terminal changes size.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// A fresh pseudo-terminal pair.
pub(crate) struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
}

pub(crate) fn open() -> io::Result<Pty> {
    let r = nix::pty::openpty(None, None).map_err(io::Error::from)?;
    Ok(Pty {
        master: r.master,
        slave: r.slave,
    })
}

/// Sets the terminal's size (the command sees SIGWINCH).
pub(crate) fn set_size(master: &impl AsRawFd, rows: u16, cols: u16) {
    let size = nix::libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the pointer, which lives across the call.
    unsafe {
        nix::libc::ioctl(master.as_raw_fd(), nix::libc::TIOCSWINSZ, &size);
    }
}

/// Makes the child's stdin — the pty's slave — its controlling terminal. Must come after the
/// `setsid` the driver already asks for (a session leader without a terminal may take one).
pub(crate) fn controlling_terminal(cmd: &mut tokio::process::Command) {
    // SAFETY: runs in the forked child before exec; one ioctl, no allocation.
    unsafe {
        cmd.pre_exec(|| {
            if nix::libc::ioctl(0, nix::libc::TIOCSCTTY as _, 0) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The exec stream of `child`, started on `pty`'s slave (the caller has dropped every other copy
/// of the slave): stdin writes and stdout reads the master; stderr is empty, as from a terminal;
/// resizes go to the master.
pub(crate) fn exec_stream(
    task_id: &str,
    child: tokio::process::Child,
    pty: Pty,
) -> Result<crate::driver::ExecStream, crate::DriverError> {
    let io_err = |e| crate::DriverError::io(task_id, "sharing the pty", e);
    let Pty { master, slave } = pty;
    drop(slave);
    let writer = master.try_clone().map_err(io_err)?;
    let sizer = master.try_clone().map_err(io_err)?;
    let reader = tokio::fs::File::from_std(std::fs::File::from(master));
    let writer = tokio::fs::File::from_std(std::fs::File::from(writer));
    Ok(crate::process_group::exec_stream_with(
        task_id,
        child,
        crate::process_group::ExecIo {
            stdin: Box::pin(writer),
            stdout: Box::pin(reader),
            stderr: Box::pin(tokio::io::empty()),
            resize: Some(Box::new(move |rows, cols| set_size(&sizer, rows, cols))),
        },
    ))
}
