"""Paths through the loops of a kernel's SASS: instructions per tensor-core product.

The offline CUDA check (analyse.py) and the Triton anchor (benches/anchors/triton_flash.py)
both judge a kernel's inner loops by what a warp issues around each tensor-core product, read
off the disassembly without a GPU:

- a loop is the address range from a backward branch's target to the branch (branches back
  to one target merged); the loops reported are those holding tensor-core instructions
  (HMMA, HGMMA) whose nested loops hold none, so an outer loop's figure never mixes several
  trips of an inner one;
- a path is a walk through the loop's basic blocks from its first instruction to a branch back
  to it, never taking a nested loop's backward branch (a nested loop's body counts once);
- tensor-core work is counted in `m16n8k16` products per warp (one `HMMA.16816`; a
  warpgroup's `HGMMA.64x64x16` is 8 for each of its warps), so that sm_80's and sm_90's
  instructions compare;
- the **whole-tile path** is the shortest path among those that do the most tensor-core
  products (for FlashAttention-2's loops: a tile whose every pair is visible, no row
  rescaled), the **masked path** the longest among them (every pair through the per-pair rule,
  every rescale taken); each is reported as instructions per `m16n8k16` product ("per
  HMMA"), with a
  histogram of what else it issues.

A kernel that runs its whole tiles and its cut tiles in separate loops (as Triton's and
FlashAttention-2's do) has both figures per loop; the kernel's whole-tile figure is the
smallest over its loops, its masked figure the largest.

Only the stdlib is used.
"""
import collections
import re

TC_OPS = ("HMMA", "HGMMA", "IMMA", "IGMMA")
Instr = collections.namedtuple("Instr", "addr guarded op operands")
# Widths of memory operations by their type modifier; 4 bytes when there is none.
WIDTHS = (("U8", 1), ("S8", 1), ("U16", 2), ("S16", 2), ("64", 8), ("128", 16))


def parse_sass(text, entry):
    """`entry`'s instructions from cuobjdump -sass output, as [Instr] in address order
    (`guarded`: the instruction carries a predicate, so a branch or exit may fall through)."""
    instrs, inside = [], False
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            inside = m.group(1) == entry
            continue
        m = inside and re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;", line)
        if m:
            body = m.group(2)
            guard = re.match(r"@(!?U?P\w+)\s+", body)
            if guard:
                body = body[guard.end():]
            op, _, operands = body.partition(" ")
            guarded = bool(guard) and guard.group(1) not in ("PT", "UPT")
            instrs.append(Instr(int(m.group(1), 16), guarded, op, operands))
    return instrs


def base(op):
    """The opcode without its modifiers (`LDS.U16` → `LDS`)."""
    return op.split(".")[0]


def width(op):
    """Bytes per thread of a memory opcode, from its type modifier."""
    mods = op.split(".")[1:]
    return next((w for mod, w in WIDTHS if mod in mods), 4)


def target(ins):
    """The address a branch jumps to, or None for anything else (or an indirect branch)."""
    if base(ins.op) not in ("BRA", "JMP"):
        return None
    found = re.findall(r"0x([0-9a-f]+)", ins.operands)
    return int(found[-1], 16) if found else None


def loops(instrs):
    """Every loop as {start: end}: a backward branch's target to its last branch back there."""
    ends = {}
    for ins in instrs:
        t = target(ins)
        if t is not None and t <= ins.addr:
            ends[t] = max(ends.get(t, 0), ins.addr)
    return ends


def is_tc(ins):
    """A tensor-core instruction."""
    return base(ins.op) in TC_OPS


def products(ins):
    """The `m16n8k16` products one warp's tensor-core instruction does (0 for any other):
    1 for `HMMA.16816`, ½ for `HMMA.1688`; a warpgroup's `HGMMA.64xNxK` is issued by each of
    its 4 warps, each doing 16 of its rows: `N·K / 128`."""
    m = re.match(r"[HI]G?MMA\.(\d+)x(\d+)x(\d+)", ins.op)
    if m:
        return int(m[1]) // 4 * int(m[2]) * int(m[3]) / 2048
    m = re.match(r"[HI]MMA\.168(16|8|32)", ins.op)
    if m:
        return int(m[1]) / 16
    return 0


def tensor_core_loops(instrs):
    """The loops that hold tensor-core instructions and whose nested loops hold none, as sorted
    (start, end) pairs."""
    spans = sorted(loops(instrs).items())
    holds = {s: any(is_tc(i) for i in instrs if s[0] <= i.addr <= s[1]) for s in spans}
    inner = [s for s in spans if holds[s] and not any(
        o != s and s[0] <= o[0] and o[1] <= s[1] and holds[o] for o in spans)]
    return inner


def blocks(body, start, end):
    """Split a loop's instructions into basic blocks: [(first address, [Instr])]."""
    leaders = {start}
    for ins in body:
        t = target(ins)
        if t is not None and start <= t <= end:
            leaders.add(t)
        if t is not None or base(ins.op) in ("EXIT", "RET"):
            leaders.add(ins.addr + 16)
    out = []
    for ins in body:
        if ins.addr in leaders or not out:
            out.append((ins.addr, []))
        out[-1][1].append(ins)
    return out


def successors(block, start, end, next_addr):
    """Where a block goes inside the loop: ('next', addr) forward edges and 'latch' for a
    branch back to the loop's start; nested loops' back edges and exits are dropped."""
    last = block[1][-1]
    out, t = [], target(last)
    if t is not None:
        if t == start:
            out.append("latch")
        elif start < t <= end and t > last.addr:
            out.append(t)
    stops = t is not None or base(last.op) in ("EXIT", "RET")
    conditional = last.guarded or ".DIV" in last.op  # BRA.DIV: taken only when diverged
    if (not stops or conditional) and next_addr is not None:
        out.append(next_addr)
    return out


def best_path(instrs, start, end, longest):
    """The path from `start` back to it passing the most tensor-core instructions: the fewest
    instructions among those, or the most when `longest`. Returns its instructions, or None
    when no path closes the loop."""
    body = [i for i in instrs if start <= i.addr <= end]
    parts = blocks(body, start, end)
    sign = 1 if longest else -1
    best = {start: ((0, 0), None)}  # first address -> (score, predecessor)
    closing = None
    for n, block in enumerate(parts):
        if block[0] not in best:
            continue
        (tc, count), _ = best[block[0]]
        score = (tc + sum(map(products, block[1])), count + sign * len(block[1]))
        next_addr = parts[n + 1][0] if n + 1 < len(parts) else None
        for succ in successors(block, start, end, next_addr):
            key = "latch" if succ == "latch" else succ
            if key == "latch":
                if closing is None or score > closing[0]:
                    closing = (score, block[0])
            elif succ not in best or score > best[succ][0]:
                best[succ] = (score, block[0])
    if closing is None:
        return None
    by_first = dict(parts)
    path, at = [], closing[1]
    while at is not None:
        path = by_first[at] + path
        at = best[at][1]
    return path


def histogram(path):
    """What a path issues, by kind: shared loads and stores by width, ldmatrix, async copies,
    global loads, special functions, branches, shuffles, barriers, the rest."""
    kinds = collections.Counter()
    for ins in path:
        op = base(ins.op)
        if op in ("LDS", "STS"):
            kinds[f"{op}.{width(ins.op)}"] += 1
        elif op in TC_OPS + ("LDSM", "LDGSTS", "LDG", "MUFU", "BRA", "SHFL", "BAR", "LD"):
            kinds[op] += 1
        else:
            kinds["other"] += 1
    return kinds


def loop_figures(instrs):
    """Per tensor-core loop: its span, both paths' instruction counts, tensor-core counts,
    histograms, and the narrow (1- or 2-byte) shared loads anywhere in the loop. A backward
    branch from out-of-line code (an mbarrier wait's retry) that no path through the range
    closes is no loop of the kernel's and is left out."""
    out = []
    for start, end in tensor_core_loops(instrs):
        paths = {name: best_path(instrs, start, end, longest)
                 for name, longest in (("whole", False), ("masked", True))}
        figures = dict(start=start, end=end,
                       narrow_shared=sum(base(i.op) == "LDS" and width(i.op) <= 2
                                         for i in instrs if start <= i.addr <= end))
        for name, path in paths.items():
            path = path or []
            tc = sum(map(products, path))
            figures[name] = dict(instrs=len(path), tc=tc, hist=histogram(path),
                                 per_tc=len(path) / tc if tc else None)
        if figures["whole"]["instrs"]:
            out.append(figures)
    return out


def kernel_figures(loops_):
    """A kernel's two figures from its loops: the smallest whole-tile and the largest masked
    instructions per tensor-core instruction (None without a tensor-core loop)."""
    whole = [f["whole"]["per_tc"] for f in loops_ if f["whole"]["per_tc"]]
    masked = [f["masked"]["per_tc"] for f in loops_ if f["masked"]["per_tc"]]
    return (min(whole) if whole else None, max(masked) if masked else None)


def describe(hist):
    """A histogram in a table cell: `LDS.2×192 LDSM×40 …`, the most frequent first."""
    return " ".join(f"{k}×{v}" for k, v in sorted(hist.items(), key=lambda kv: -kv[1]))
