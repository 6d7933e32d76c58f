"""Enter a named network namespace the way `ip netns exec NAME` does, in the calling process.

`ip netns exec` (iproute2 lib/namespace.c, netns_switch and bind_etc) does, before it execs:

    setns(open(/run/netns/NAME), CLONE_NEWNET)
    unshare(CLONE_NEWNS)                          a mount namespace of its own
    mount("", "/", MS_SLAVE|MS_REC)               nothing it mounts propagates back to the host
    umount2("/sys", MNT_DETACH); mount sysfs      a /sys that describes the namespace's devices
    mount --bind /etc/netns/NAME/F /etc/F         per-namespace files (the live uplink's resolv.conf)

`enter(name)` does the same steps, so a process forked by the fork server (lab/forkserver/server.py)
sees the same network, /sys and /etc as one started with `ip netns exec`. Python 3.11 has no
os.setns (3.12+), hence ctypes on libc. Call it only in a process with one thread: a mount namespace
is per process, and the caller is a child just forked.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

from lab.topology.uplink import NETNS_ETC     # per-namespace /etc files, bound over /etc
# setns on the calling thread, which after a fork is the whole process (netem's in_netns uses it
# for a block and switches back; here there is no going back)
from netem.kernel import NETNS_DIR, _setns

# <sched.h>, <sys/mount.h>
CLONE_NEWNS = 0x00020000
MS_RDONLY = 0x1
MS_BIND = 0x1000
MS_REC = 0x4000
MS_SLAVE = 0x80000
MNT_DETACH = 0x2
ST_RDONLY = 0x1

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    enc = (lambda s: s.encode() if s is not None else None)
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, None), f"mount {target}")


def etc_binds(name: str, etc_dir: Path = NETNS_ETC) -> list[tuple[Path, Path]]:
    """(source, target) of each /etc/netns/NAME entry `ip netns exec` binds over /etc."""
    d = etc_dir / name
    if not d.is_dir():
        return []
    return [(d / f, Path("/etc") / f) for f in sorted(os.listdir(d))]


def enter(name: str) -> None:
    """Move the calling (single-threaded) process into network namespace NAME with `ip netns exec`'s
    view of /sys and /etc. OSError on the first step that fails: the caller must not go on."""
    fd = os.open(os.path.join(NETNS_DIR, name), os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(fd)
    finally:
        os.close(fd)
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount("", "/", "none", MS_SLAVE | MS_REC)
    flags = 0
    if _libc.umount2(b"/sys", MNT_DETACH) != 0:
        # as iproute2: no sysfs to take off, or one that would not go; a read-only one cannot be
        # shadowed by a read-write one
        try:
            flags = MS_RDONLY if os.statvfs("/sys").f_flag & ST_RDONLY else 0
        except OSError:
            pass
    _mount(name, "/sys", "sysfs", flags)
    for source, target in etc_binds(name):
        # iproute2 reports a failed bind and carries on; so do we (the file is then the host's)
        if _libc.mount(str(source).encode(), str(target).encode(), b"none", MS_BIND, None) != 0:
            err = ctypes.get_errno()
            os.write(2, f"lab: bind {source} -> {target}: {os.strerror(err)}\n".encode())
