"""Anchors for `benches/cpu_attention.rs`: what a PyTorch user would run for the same attention.

Times, on the CPU with the given thread count, causal sliding-window attention (window W: query i
sees keys i-W+1 ..= i) at B=1, H=8, d=64, f32, forward and forward+backward:
- `flex_attention`, compiled with `torch.compile`, with a sliding-window block mask (forward
  only: FlexAttention has no backward on the CPU);
- `scaled_dot_product_attention` with a boolean mask (O(N^2): skipped past N=8192);
- a 2048x2048 f32 matmul, the machine's dense peak as torch reaches it.

Prints CSV on stdout (`anchor,n,forward_ms,forward_backward_ms`, medians of a few runs after a
warm-up), which `cargo bench --bench cpu_attention -- --anchors FILE` reads to print swa-zoo /
torch ratios. Progress goes to stderr. Needs torch >= 2.5; used only for benchmarks, never by the
build or the tests.

    python benches/anchors/torch_attention.py --threads 2 > target/anchors.csv
"""

import argparse
import statistics
import sys
import time

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

HEADS, DIM = 8, 64


def median_ms(call, runs):
    call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def inputs(n, grad):
    gen = torch.Generator().manual_seed(n)
    make = lambda: torch.randn(1, HEADS, n, DIM, generator=gen).requires_grad_(grad)
    return make(), make(), make()


def timed(attend, n, runs, backward=True):
    q, k, v = inputs(n, False)
    with torch.no_grad():
        forward = median_ms(lambda: attend(q, k, v), runs)
    if not backward:
        return forward, None
    q, k, v = inputs(n, True)
    g = torch.randn(1, HEADS, n, DIM)

    def step():
        attend(q, k, v).backward(g)
        q.grad = k.grad = v.grad = None

    return forward, median_ms(step, runs)


def cell(ms):
    return "" if ms is None else f"{ms:.3f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--lengths", default="1024,4096,16384")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    w = args.window

    def sliding(b, h, i, j):
        return (j <= i) & (i - j < w)

    compiled = torch.compile(flex_attention, dynamic=False)
    print("anchor,n,forward_ms,forward_backward_ms")
    a = torch.randn(2048, 2048)
    matmul = median_ms(lambda: a @ a, 10)
    print(f"torch matmul 2048 f32,2048,{matmul:.3f},")
    for n in map(int, args.lengths.split(",")):
        runs = 3 if n >= 16384 else 5
        mask = create_block_mask(sliding, None, None, n, n, device="cpu")
        flex = lambda q, k, v: compiled(q, k, v, block_mask=mask)
        print(f"flex_attention N={n}", file=sys.stderr)
        # FlexAttention has no backward on the CPU (torch 2.15: NotImplementedError).
        fwd, both = timed(flex, n, runs, backward=False)
        print(f"torch flex_attention,{n},{fwd:.3f},{cell(both)}", flush=True)
        if n <= 8192:
            i = torch.arange(n)
            dense = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < w)
            sdpa = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=dense
            )
            print(f"sdpa N={n}", file=sys.stderr)
            fwd, both = timed(sdpa, n, runs)
            print(f"torch sdpa (mask),{n},{fwd:.3f},{both:.3f}", flush=True)


if __name__ == "__main__":
    main()
