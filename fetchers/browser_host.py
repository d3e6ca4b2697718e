"""What a fetcher's Chromium needs from its host (issue 30), kept beside the renderer: a
scratch directory short enough for its socket and locked while the fetcher lives, and the
memory its process tree holds (how the renderer knows when to recycle it)."""

import contextlib
import fcntl
import glob
import os
import shutil
import tempfile

# A switch Chromium ignores, naming the launch: how its browser process is found in /proc.
LAUNCH_MARK = "--pricewatch-launch="


# Chromium puts a Unix socket in its TMPDIR (`.org.chromium.Chromium.XXXXXX/SingletonSocket`)
# and aborts at launch when that path is over 107 bytes: a long TMPDIR (macOS's
# /var/folders/..., a test's) is not a place for the fetcher's directory.
SOCKET_ROOM = 40


def short_temp_root() -> str:
    """The system's temporary directory if its path is short enough, else /tmp."""
    default = tempfile.gettempdir()
    if len(default) <= SOCKET_ROOM or not os.path.isdir("/tmp"):
        return default
    return "/tmp"


# A fetcher's directory holds this file, locked (flock) while the fetcher lives: the lock
# goes with its process however it ends, SIGKILL included, where `close` never runs.
SCRATCH_LOCK = ".pricewatch-fetcher"


def scratch_dir(root: str) -> tuple[str, int]:
    """A new directory for a fetcher's Chromium and the descriptor that holds its lock.
    First removes the directories of fetchers whose process died (no one holds their lock):
    a killed worker leaves its directory behind, and only a later one can remove it."""
    for stale in glob.glob(os.path.join(root, "pwc-*", SCRATCH_LOCK)):
        with contextlib.suppress(OSError):
            lock = os.open(stale, os.O_RDONLY)
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # OSError: a live fetcher's
                shutil.rmtree(os.path.dirname(stale), ignore_errors=True)
            finally:
                os.close(lock)
    path = tempfile.mkdtemp(prefix="pwc-", dir=root)
    # Locked before it has its name: another fetcher starting at this moment never finds
    # it unlocked (and takes it for a dead one's).
    unnamed = os.path.join(path, SCRATCH_LOCK + ".new")
    lock = os.open(unnamed, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.rename(unnamed, os.path.join(path, SCRATCH_LOCK))
    return path, lock


def browser_memory(profile: str) -> int:
    """Bytes (proportional set size: shared pages counted once) held by the Chromium
    launched with `profile`: its browser process and every process below it.
    0 where /proc cannot tell (not Linux): recycling by count still applies."""
    parents: dict[int, int] = {}
    root = None
    marker = f"{LAUNCH_MARK}{profile}".encode()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                parents[int(entry)] = int(stat.read().rsplit(b")", 1)[1].split()[1])
            if root is None:
                with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                    if marker in cmdline.read().split(b"\0"):
                        root = int(entry)
        except (OSError, ValueError, IndexError):
            continue
    if root is None:
        return 0
    held = 0
    for pid in parents:
        ancestor = pid
        while ancestor not in (root, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == root:
            held += _pss(pid)
    return held


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0
