"""The peak resident memory of the running process, which the anchors report beside their
times. Python 3, standard library only."""

from pathlib import Path


def vmhwm_kib():
    """Peak resident memory of this process (VmHWM), in KiB; None where /proc has none."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None
