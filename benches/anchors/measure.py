"""What the anchors share to measure: the peak resident memory they report beside their times,
the device memory they hold on a GPU, a clock that waits for the device,
the timing flags that `benches/decode_hf.rs` passes to every decoding anchor, and the fields of
its JSON line that every decoding anchor reports alike. Python 3,
standard library only."""

import os
import statistics
import subprocess
import time
from pathlib import Path


def vmhwm_kib():
    """Peak resident memory of this process (VmHWM), in KiB; None where /proc has none."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return None


def gpu_used_mib():
    """Device memory this process holds now, in MiB, as nvidia-smi reports it (the caching
    allocator's pages and the CUDA context): the same reading for every side of a GPU bench.
    None without nvidia-smi or when it does not list this process."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in out.splitlines():
        pid, _, used = line.partition(",")
        if pid.strip() == str(os.getpid()):
            return float(used)
    return None


def clock(device):
    """Seconds now, once the queued work of `device` (a torch.device) is done: what the GPU
    anchors time with (torch is the caller's; this module imports nothing but the standard
    library)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
    return time.perf_counter()


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


def decode_report(args, prompt_tokens, runs):
    """The fields every decoding anchor's JSON line shares, from its greedy runs (each
    (prefill seconds, decode seconds per token, new ids)): the best prefill, the median and
    every run's ms per token, the last run's new ids and the peak resident memory."""
    decode_ms = [1e3 * decode for _, decode, _ in runs]
    return {
        "threads": args.threads,
        "prompt_tokens": prompt_tokens,
        "new_tokens": args.new_tokens,
        "prefill_ms": min(1e3 * prefill for prefill, _, _ in runs),
        "decode_ms_per_token": statistics.median(decode_ms),
        "decode_ms_per_token_runs": decode_ms,
        "tokens": runs[-1][2],
        "vmhwm_kib": vmhwm_kib(),
    }
