"""What the anchors share to measure: the peak resident memory they report beside their times,
and the timing flags that `benches/decode_hf.rs` passes to every decoding anchor. Python 3,
standard library only."""

from pathlib import Path


def vmhwm_kib():
    """Peak resident memory of this process (VmHWM), in KiB; None where /proc has none."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def positive(value):
    """An argparse type: an integer of at least 1."""
    number = int(value)
    if number < 1:
        raise ValueError(f"{value} is not a positive integer")
    return number


def add_timing_flags(parser):
    """`--new-tokens`, `--threads` and `--runs`, as the decode bench passes them."""
    parser.add_argument("--new-tokens", type=positive, default=256)
    parser.add_argument("--threads", type=positive, default=2)
    parser.add_argument("--runs", type=positive, default=3)
