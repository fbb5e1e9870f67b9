"""Anchors for `benches/gpu_attention.rs`: what a PyTorch user would run on the same GPU.

Times, on CUDA, causal windowed attention at B=1, H=16 over the bench's grid (N, W, d, dtype),
forward and forward+backward, for the two kinds of the bench:
- SWA: query i sees keys i-W+1 ..= i in every head;
- MSWA: head h sees a window of W * (1/4, 1/2, 1, 2)[4h / H] (per-head windows);
with:
- `flex_attention`, compiled with `torch.compile`, with a block mask built from the window
  (the anchor of the bench's ratio columns);
- `scaled_dot_product_attention(is_causal=True)`: full causal attention, independent of W
  (FlashAttention-2 inside PyTorch where the GPU has it), once per (N, d, dtype);
- `flash_attn_func` with `window_size=(W-1, 0)` (FlashAttention-2's sliding window), SWA only,
  when the `flash_attn` package is installed.

Prints CSV on stdout (`anchor,kind,dtype,n,w,d,forward_ms,forward_backward_ms`, medians of CUDA
event timings after warm-ups), which `cargo bench --bench gpu_attention -- --anchors FILE` reads.
Progress goes to stderr. Needs torch >= 2.5 and a CUDA GPU; used only for benchmarks, never by
the build or the tests.

    python benches/anchors/gpu_attention.py > target/gpu_anchors.csv
"""

import argparse
import statistics
import sys

import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

try:
    from flash_attn import flash_attn_func
except ImportError:
    flash_attn_func = None

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}

# Every (shape, dtype, grad mode) of the grid is a recompilation of `flex_attention`; past
# dynamo's default limit of 8 it falls back to the unfused eager path (seen on an H100,
# 2026-11-26: f16 timings 50x the bf16 ones, then out of memory at N = 16384).
torch._dynamo.config.cache_size_limit = 256
torch._dynamo.config.recompile_limit = 256
FACTORS = (0.25, 0.5, 1.0, 2.0)


def head_windows(kind, w, heads):
    """The window of each head, as the bench's `Kind::windows` gives it."""
    if kind == "SWA":
        return [w] * heads
    return [int(w * FACTORS[4 * h // heads]) for h in range(heads)]


def median_ms(call, runs):
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def timed(attend, shape, dtype, runs):
    make = lambda grad: torch.randn(shape, device="cuda", dtype=dtype, requires_grad=grad)
    q, k, v = make(False), make(False), make(False)
    with torch.no_grad():
        forward = median_ms(lambda: attend(q, k, v), runs)
    q, k, v = make(True), make(True), make(True)
    g = torch.randn(shape, device="cuda", dtype=dtype)

    def step():
        attend(q, k, v).backward(g)
        q.grad = k.grad = v.grad = None

    return forward, median_ms(step, runs)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="4096,16384")
    parser.add_argument("--windows", default="256,1024,4096")
    parser.add_argument("--dims", default="64,128")
    parser.add_argument("--dtypes", default="bf16,f16,f32")
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    heads = args.heads
    compiled = torch.compile(flex_attention, dynamic=False)
    print("anchor,kind,dtype,n,w,d,forward_ms,forward_backward_ms")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", file=sys.stderr)
    for name in args.dtypes.split(","):
        dtype = DTYPES[name]
        for d in map(int, args.dims.split(",")):
            for n in map(int, args.lengths.split(",")):
                shape = (1, heads, n, d)
                print(f"sdpa {name} N={n} d={d}", file=sys.stderr)
                causal = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=True
                )
                fwd, both = timed(causal, shape, dtype, args.runs)
                print(f"torch sdpa causal full,full,{name},{n},{n},{d},{fwd:.4f},{both:.4f}")
                for w in map(int, args.windows.split(",")):
                    for kind in ("SWA", "MSWA"):
                        windows = torch.tensor(head_windows(kind, w, heads), device="cuda")

                        def window(b, h, i, j):
                            return (j <= i) & (i - j < windows[h])

                        mask = create_block_mask(window, None, heads, n, n, device="cuda")
                        flex = lambda q, k, v: compiled(q, k, v, block_mask=mask)
                        print(f"flex_attention {kind} {name} N={n} W={w} d={d}", file=sys.stderr)
                        fwd, both = timed(flex, shape, dtype, args.runs)
                        print(f"torch flex_attention,{kind},{name},{n},{w},{d},{fwd:.4f},{both:.4f}")
                    if flash_attn_func is not None and dtype != torch.float32:
                        # flash_attn takes [batch, N, H, d].
                        fa = lambda q, k, v: flash_attn_func(
                            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                            causal=True, window_size=(w - 1, 0),
                        ).transpose(1, 2)
                        fwd, both = timed(fa, shape, dtype, args.runs)
                        print(f"flash_attn 2,SWA,{name},{n},{w},{d},{fwd:.4f},{both:.4f}")
                sys.stdout.flush()


if __name__ == "__main__":
    main()
