"""The offline anchor of the kernels' instructions per tensor-core product: FlashAttention-2 in
Triton, with the windowed core's sliding-window causal mask, compiled without a GPU.

Query `i` sees keys `i − W + 1 ..= i` (docs/semantics.md §2, `left = W − 1`), bf16 inputs,
f32 accumulation, `[batch · heads, N, d]` rows, head dims 64 and 128, as the grid of
`benches/gpu_attention.rs` runs them. Three kernels, each of FlashAttention-2's design and
each with its whole tiles and its cut tiles in separate loops (the cut ones ask the mask):
- `forward`: a program owns `BLOCK_M` query rows, walks the key tiles of its window, keeps
  the running maxima and sums in log₂ units, writes `O` and `lse₂ = m + log₂ l`;
- `key_grads`: a program owns `BLOCK_N` key rows, walks the query tiles that see them,
  accumulates `dV = Pᵀ·dO` and `dK = dSᵀ·Q`;
- `query_grads`: a program owns `BLOCK_M` query rows, accumulates `dQ = dS·K`.
`delta = rowsum(O ∘ dO)` comes in, as the windowed core's row terms do.

    target/triton-venv/bin/python benches/anchors/triton_flash.py --out target/triton-anchor \
        --check-venv target/cuda-check/venv

compiles every kernel for sm_80 and sm_90 (`GPUTarget("cuda", cc, 32)`, Triton's bundled
ptxas), disassembles each with the offline CUDA check's cuobjdump, and prints the check's
figures for its loops (`.ci/cuda-check/sass_paths.py`): instructions per HMMA on the
whole-tile and masked paths and what else they issue. `--run` instead checks the kernels
against a float64 PyTorch reference on a CUDA GPU (needs torch). Nothing in the build or
the tests imports this file.
"""
import argparse
import os
import subprocess
import sys

import triton
import triton.language as tl

LOG2E = 1.4426950408889634


@triton.jit
def _forward_tiles(acc, m_i, l_i, q, K, V, base, rows, lo, hi, N, W, qk_scale,
                   MASKED: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """One run of key tiles `lo .. hi` of the online softmax; MASKED tiles ask the window."""
    dims = tl.arange(0, HEAD_DIM)
    for start in range(lo, hi, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        cols = start + tl.arange(0, BLOCK_N)
        at = base + cols[:, None] * HEAD_DIM + dims[None, :]
        if MASKED:
            k = tl.load(K + at, mask=cols[:, None] < N, other=0.0)
        else:
            k = tl.load(K + at)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        if MASKED:
            seen = (cols[None, :] <= rows[:, None]) & (cols[None, :] > rows[:, None] - W)
            s = tl.where(seen & (cols[None, :] < N), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        if MASKED:
            # A row that has seen no key yet keeps m = −∞: shift by 0 instead (one per row).
            m_new = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if MASKED:
            v = tl.load(V + at, mask=cols[:, None] < N, other=0.0)
        else:
            v = tl.load(V + at)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, m_i, l_i


@triton.jit
def forward(Q, K, V, O, LSE, N, W, qk_scale,
            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid (N / BLOCK_M, batch · heads). `qk_scale` is the softmax scale times log₂ e."""
    m0 = tl.program_id(0) * BLOCK_M
    base = tl.program_id(1).to(tl.int64) * N * HEAD_DIM
    rows = m0 + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + rows[:, None] * HEAD_DIM + dims[None, :], mask=rows[:, None] < N)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    lo = tl.maximum(m0 - W + 1, 0) // BLOCK_N * BLOCK_N
    whole_lo = tl.minimum(tl.cdiv(tl.maximum(m0 + BLOCK_M - W, 0), BLOCK_N) * BLOCK_N, m0)
    # The diagonal first (every row sees its own key there), then whole tiles, then the cut
    # left edge of the window.
    acc, m_i, l_i = _forward_tiles(acc, m_i, l_i, q, K, V, base, rows, m0, m0 + BLOCK_M, N, W,
                                   qk_scale, True, BLOCK_N, HEAD_DIM)
    acc, m_i, l_i = _forward_tiles(acc, m_i, l_i, q, K, V, base, rows, whole_lo, m0, N, W,
                                   qk_scale, False, BLOCK_N, HEAD_DIM)
    acc, m_i, l_i = _forward_tiles(acc, m_i, l_i, q, K, V, base, rows, lo, whole_lo, N, W,
                                   qk_scale, True, BLOCK_N, HEAD_DIM)
    acc = acc / l_i[:, None]
    tl.store(LSE + tl.program_id(1).to(tl.int64) * N + rows, m_i + tl.math.log2(l_i),
             mask=rows < N)
    tl.store(O + base + rows[:, None] * HEAD_DIM + dims[None, :], acc.to(O.dtype.element_ty),
             mask=rows[:, None] < N)


@triton.jit
def _key_grad_tiles(dk, dv, k, v, Q, DO, LSE, DELTA, base, row_base, keys, lo, hi, N, W,
                    qk_scale, MASKED: tl.constexpr, BLOCK_M: tl.constexpr,
                    HEAD_DIM: tl.constexpr):
    """One run of query tiles `lo .. hi` of dK and dV; MASKED tiles ask the window."""
    dims = tl.arange(0, HEAD_DIM)
    for start in range(lo, hi, BLOCK_M):
        start = tl.multiple_of(start, BLOCK_M)
        rows = start + tl.arange(0, BLOCK_M)
        at = base + rows[:, None] * HEAD_DIM + dims[None, :]
        if MASKED:
            q = tl.load(Q + at, mask=rows[:, None] < N, other=0.0)
            do = tl.load(DO + at, mask=rows[:, None] < N, other=0.0)
            lse = tl.load(LSE + row_base + rows, mask=rows < N, other=0.0)
            delta = tl.load(DELTA + row_base + rows, mask=rows < N, other=0.0)
        else:
            q = tl.load(Q + at)
            do = tl.load(DO + at)
            lse = tl.load(LSE + row_base + rows)
            delta = tl.load(DELTA + row_base + rows)
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])
        if MASKED:
            seen = (keys[:, None] <= rows[None, :]) & (keys[:, None] > rows[None, :] - W)
            p_t = tl.where(seen & (rows[None, :] < N), p_t, 0.0)
        dv += tl.dot(p_t.to(do.dtype), do)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = p_t * (dp_t - delta[None, :])
        dk += tl.dot(ds_t.to(q.dtype), q)
    return dk, dv


@triton.jit
def key_grads(Q, K, V, DO, LSE, DELTA, DK, DV, N, W, scale, qk_scale,
              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid (N / BLOCK_N, batch · heads): dK, dV of BLOCK_N keys (BLOCK_M divides BLOCK_N)."""
    n0 = tl.program_id(0) * BLOCK_N
    row_base = tl.program_id(1).to(tl.int64) * N
    base = row_base * HEAD_DIM
    keys = n0 + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD_DIM)
    at = base + keys[:, None] * HEAD_DIM + dims[None, :]
    k = tl.load(K + at, mask=keys[:, None] < N, other=0.0)
    v = tl.load(V + at, mask=keys[:, None] < N, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    # Queries n0 ..= n0 + BLOCK_N + W − 2 see these keys; tiles from n0 + BLOCK_N to the last
    # one ending by n0 + W see all of them.
    hi = tl.cdiv(tl.minimum(n0 + BLOCK_N + W - 1, N), BLOCK_M) * BLOCK_M
    whole_lo = tl.minimum(n0 + BLOCK_N, hi)
    whole_hi = tl.maximum(tl.minimum((n0 + W) // BLOCK_M * BLOCK_M, hi), whole_lo)
    dk, dv = _key_grad_tiles(dk, dv, k, v, Q, DO, LSE, DELTA, base, row_base, keys, n0,
                             whole_lo, N, W, qk_scale, True, BLOCK_M, HEAD_DIM)
    dk, dv = _key_grad_tiles(dk, dv, k, v, Q, DO, LSE, DELTA, base, row_base, keys, whole_lo,
                             whole_hi, N, W, qk_scale, False, BLOCK_M, HEAD_DIM)
    dk, dv = _key_grad_tiles(dk, dv, k, v, Q, DO, LSE, DELTA, base, row_base, keys, whole_hi,
                             hi, N, W, qk_scale, True, BLOCK_M, HEAD_DIM)
    tl.store(DK + at, (dk * scale).to(DK.dtype.element_ty), mask=keys[:, None] < N)
    tl.store(DV + at, dv.to(DV.dtype.element_ty), mask=keys[:, None] < N)


@triton.jit
def _query_grad_tiles(dq, q, do, lse, delta, K, V, base, rows, lo, hi, N, W, qk_scale,
                      MASKED: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """One run of key tiles `lo .. hi` of dQ; MASKED tiles ask the window."""
    dims = tl.arange(0, HEAD_DIM)
    for start in range(lo, hi, BLOCK_N):
        start = tl.multiple_of(start, BLOCK_N)
        cols = start + tl.arange(0, BLOCK_N)
        at = base + cols[:, None] * HEAD_DIM + dims[None, :]
        if MASKED:
            k = tl.load(K + at, mask=cols[:, None] < N, other=0.0)
            v = tl.load(V + at, mask=cols[:, None] < N, other=0.0)
        else:
            k = tl.load(K + at)
            v = tl.load(V + at)
        p = tl.math.exp2(tl.dot(q, tl.trans(k)) * qk_scale - lse[:, None])
        if MASKED:
            seen = (cols[None, :] <= rows[:, None]) & (cols[None, :] > rows[:, None] - W)
            p = tl.where(seen & (cols[None, :] < N), p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    return dq


@triton.jit
def query_grads(Q, K, V, DO, LSE, DELTA, DQ, N, W, scale, qk_scale,
                HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Grid (N / BLOCK_M, batch · heads): dQ of BLOCK_M queries."""
    m0 = tl.program_id(0) * BLOCK_M
    row_base = tl.program_id(1).to(tl.int64) * N
    base = row_base * HEAD_DIM
    rows = m0 + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD_DIM)
    at = base + rows[:, None] * HEAD_DIM + dims[None, :]
    q = tl.load(Q + at, mask=rows[:, None] < N, other=0.0)
    do = tl.load(DO + at, mask=rows[:, None] < N, other=0.0)
    lse = tl.load(LSE + row_base + rows, mask=rows < N, other=0.0)
    delta = tl.load(DELTA + row_base + rows, mask=rows < N, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    lo = tl.maximum(m0 - W + 1, 0) // BLOCK_N * BLOCK_N
    whole_lo = tl.minimum(tl.cdiv(tl.maximum(m0 + BLOCK_M - W, 0), BLOCK_N) * BLOCK_N, m0)
    dq = _query_grad_tiles(dq, q, do, lse, delta, K, V, base, rows, m0, m0 + BLOCK_M, N, W,
                           qk_scale, True, BLOCK_N, HEAD_DIM)
    dq = _query_grad_tiles(dq, q, do, lse, delta, K, V, base, rows, whole_lo, m0, N, W,
                           qk_scale, False, BLOCK_N, HEAD_DIM)
    dq = _query_grad_tiles(dq, q, do, lse, delta, K, V, base, rows, lo, whole_lo, N, W,
                           qk_scale, True, BLOCK_N, HEAD_DIM)
    tl.store(DQ + at, (dq * scale).to(DQ.dtype.element_ty), mask=rows[:, None] < N)


# (kernel, pointer arguments, scalar arguments, tiles (BLOCK_M, BLOCK_N), warps) per head dim:
# FlashAttention-2's shapes, as Triton's tutorial tunes them for an A100.
KERNELS = {
    "forward": (forward, "Q K V O", "N:i32 W:i32 qk_scale:fp32", {64: (128, 64, 4),
                                                                   128: (128, 64, 8)}),
    "key_grads": (key_grads, "Q K V DO", "N:i32 W:i32 scale:fp32 qk_scale:fp32",
                  {64: (32, 128, 4), 128: (32, 128, 8)}),
    "query_grads": (query_grads, "Q K V DO", "N:i32 W:i32 scale:fp32 qk_scale:fp32",
                    {64: (128, 32, 4), 128: (128, 32, 8)}),
}
STAGES = {80: 3, 90: 3}


def signature(fn, pointers, scalars):
    """Triton's signature of `fn`: bf16 pointers, f32 row terms and outputs' types."""
    sig = {}
    for name in fn.arg_names:
        if name in pointers.split():
            sig[name] = "*bf16"
        elif name in ("LSE", "DELTA"):
            sig[name] = "*fp32"
        elif name in ("O", "DK", "DV", "DQ"):
            sig[name] = "*bf16"
        elif name in dict(s.split(":") for s in scalars.split()):
            sig[name] = dict(s.split(":") for s in scalars.split())[name]
        else:
            sig[name] = "constexpr"
    return sig


def compile_all(out, capability):
    """Compile every kernel at both head dims for `capability`; yield (name, dim, config,
    cubin path, entry)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    for name, (fn, pointers, scalars, tiles) in KERNELS.items():
        for dim, (block_m, block_n, warps) in tiles.items():
            constexprs = {"HEAD_DIM": dim, "BLOCK_M": block_m, "BLOCK_N": block_n}
            sig = signature(fn, pointers, scalars)
            # What Triton's JIT assumes of a call it specialises: pointers and N multiples of
            # 16 (16-byte aligned rows, whole tiles at the grid's lengths).
            aligned = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
                       if sig[name].startswith("*") or name == "N"}
            src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=aligned)
            options = {"num_warps": warps, "num_stages": STAGES[capability]}
            compiled = triton.compile(src, target=GPUTarget("cuda", capability, 32),
                                      options=options)
            path = os.path.join(out, f"{name}.d{dim}.sm{capability}.cubin")
            with open(path, "wb") as f:
                f.write(compiled.asm["cubin"])
            config = f"{block_m}×{block_n}, {warps} warps, {options['num_stages']} stages"
            yield name, dim, config, path, compiled.metadata.name


def report(args):
    """Compile, disassemble and print the figures as a markdown table."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", ".ci", "cuda-check"))
    import sass_paths
    from analyse import find_toolkit

    tk = find_toolkit(args.check_venv)
    os.makedirs(args.out, exist_ok=True)
    rows = ["| kernel | d | arch | tiles | loop | per HMMA whole tile / masked | HMMA | "
            "whole-tile path |", "|---|---|---|---|---|---|---|---|"]
    for capability in (80, 90):
        for name, dim, config, path, entry in compile_all(args.out, capability):
            sass = subprocess.run([tk["cuobjdump"], "-sass", path], capture_output=True,
                                  text=True, check=True).stdout
            instrs = sass_paths.parse_sass(sass, entry)
            for n, loop in enumerate(sass_paths.loop_figures(instrs)):
                whole, masked = loop["whole"], loop["masked"]
                rows.append(f"| {name} | {dim} | sm_{capability} | {config} | {n} | "
                            f"{whole['per_tc']:.2f} / {masked['per_tc']:.2f} | {whole['tc']:g} | "
                            f"{sass_paths.describe(whole['hist'])} |")
            print(f"compiled {name} d={dim} sm_{capability}", file=sys.stderr)
    print(f"Triton {triton.__version__}")
    print("\n".join(rows))


def run_check():
    """On a CUDA GPU: each kernel against a float64 reference on random inputs (not zeros)."""
    import torch

    torch.manual_seed(0)
    for dim in (64, 128):
        for n, w in ((512, 100), (1024, 256), (384, 1000)):
            bh = 3
            q, k, v, do = (torch.randn(bh, n, dim, device="cuda", dtype=torch.bfloat16)
                           for _ in range(4))
            i = torch.arange(n, device="cuda")
            seen = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - w)
            qd, kd, vd = (x.double().requires_grad_() for x in (q, k, v))
            s = (qd @ kd.transpose(1, 2)) / dim ** 0.5
            ref = torch.softmax(s.masked_fill(~seen, float("-inf")), -1) @ vd
            ref.backward(do.double())
            scale = dim ** -0.5
            o = torch.empty_like(q)
            lse = torch.empty(bh, n, device="cuda", dtype=torch.float32)
            bm, bn, warps = KERNELS["forward"][3][dim]
            forward[(n // bm, bh)](q, k, v, o, lse, n, w, scale * LOG2E, HEAD_DIM=dim,
                                   BLOCK_M=bm, BLOCK_N=bn, num_warps=warps)
            delta = (o.float() * do.float()).sum(-1)
            dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
            bm, bn, warps = KERNELS["key_grads"][3][dim]
            key_grads[(n // bn, bh)](q, k, v, do, lse, delta, dk, dv, n, w, scale,
                                     scale * LOG2E, HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn,
                                     num_warps=warps)
            bm, bn, warps = KERNELS["query_grads"][3][dim]
            query_grads[(n // bm, bh)](q, k, v, do, lse, delta, dq, n, w, scale,
                                       scale * LOG2E, HEAD_DIM=dim, BLOCK_M=bm, BLOCK_N=bn,
                                       num_warps=warps)
            for what, got, want in (("o", o, ref), ("dq", dq, qd.grad), ("dk", dk, kd.grad),
                                    ("dv", dv, vd.grad)):
                err = ((got.double() - want).norm() / want.norm()).item()
                status = "ok" if err < 2e-2 else "FAIL"
                print(f"d={dim} n={n} w={w} {what}: relative error {err:.2e} {status}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="target/triton-anchor", help="folder for the cubins")
    p.add_argument("--check-venv", default="target/cuda-check/venv",
                   help="the offline CUDA check's venv (its cuobjdump)")
    p.add_argument("--run", action="store_true", help="check the kernels on a CUDA GPU")
    args = p.parse_args()
    if args.run:
        run_check()
    else:
        report(args)


if __name__ == "__main__":
    main()
