#!/usr/bin/env python3
"""Offline CUDA check: compile CubeCL's CUDA C++ kernels to PTX/SASS without a GPU and inspect them.

Input: a folder with manifest.json and the .cu files it names (written elsewhere by
cubecl-cpp's CUDA dialect).  Every manifest entry is compiled for each target arch with
NVRTC (through ctypes, like cubecl-cuda does at run time), assembled with ptxas -v, and
disassembled with cuobjdump -sass.  From that we report registers, spills, stack, shared
memory, theoretical occupancy, and what the *main loop* of the kernel executes.

Main loop: every backward branch (BRA whose target address is below its own address)
closes a loop spanning target..branch; branches back to the same target are merged.
The main loop is the loop whose address range holds the most "work" (global loads plus
tensor-core/LDSM instructions), ties broken by instruction count; an outer loop always
wins over the loops nested in it, since their instructions lie inside its range.
A function without any backward branch (or an entry with "whole": true) is inspected whole
and marked "whole".

Occupancy follows cuda_occupancy.h: registers per warp rounded up to 256, warps placed
per sub-partition (4 x 16384 registers), capped at 32 blocks / 2048 threads per SM;
shared = static (ptxas) + dynamic (manifest) + 1 KiB driver reserve, in 128 B units.

Only the stdlib is used; NVRTC, ptxas and cuobjdump come from NVIDIA's PyPI wheels
(see requirements.txt / setup.sh), found in the site-packages of --venv or sys.path.

Known violations: --known FILE lists the rules the kernels still break (keys: kernel,
variant, arch, rule); those are reported but do not fail, while a new violation or a listed
one that no longer occurs does (so the list shrinks with every fix). A key marked '~' varies
from run to run (CubeCL's C++ for one kernel changes between runs: its declarations' order
and shared-memory offsets, which can tip ptxas into a small spill): it fails neither when it
occurs nor when it does not. --write-known FILE writes the current keys.

Exit status: 0 ok, 1 a rule was broken (unless --no-fail), 2 a tool/compile error.
"""
import argparse
import concurrent.futures
import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import sass_paths

ARCHES = ("sm_90a", "sm_80")
# Per-SM limits used by the occupancy estimate (CUDA occupancy calculator rules).
LIMITS = {
    "sm_90a": dict(smem_sm=228 * 1024, smem_block=227 * 1024),
    "sm_80": dict(smem_sm=164 * 1024, smem_block=163 * 1024),
}
REGS_PER_SM, SUB_PARTITIONS, REG_UNIT, MAX_REGS = 65536, 4, 256, 255
MAX_BLOCKS, MAX_THREADS, SMEM_RESERVED, SMEM_UNIT = 32, 2048, 1024, 128
TC_OPS = ("HMMA", "HGMMA", "IMMA", "IGMMA")  # tensor-core math
GLOBAL_LOADS = ("LDG", "LDGSTS")  # generic LD may be shared or global: only counted, not judged


class ToolError(Exception):
    """A compile/assemble/disassemble step failed; the message carries the tool's log."""


def find_toolkit(venv):
    """Locate libnvrtc, ptxas, cuobjdump and include dirs in the NVIDIA wheels' nvidia/cu* tree."""
    roots = []
    if venv:
        roots += glob.glob(os.path.join(venv, "lib", "python3*", "site-packages"))
    roots += [p for p in sys.path if p.endswith("site-packages")]
    for sp in roots:
        for cu in sorted(glob.glob(os.path.join(sp, "nvidia", "cu1*")), reverse=True):
            libs = glob.glob(os.path.join(cu, "lib", "libnvrtc.so*"))
            libs = [l for l in libs if "builtins" not in l]
            tools = {t: os.path.join(cu, "bin", t) for t in ("ptxas", "cuobjdump")}
            if libs and all(os.access(p, os.X_OK) for p in tools.values()):
                inc = os.path.join(cu, "include")
                incs = [inc] + [d for d in [os.path.join(inc, "cccl")] if os.path.isdir(d)]
                return dict(nvrtc=libs[0], includes=incs, **tools)
    raise ToolError("NVIDIA wheels not found; run .ci/cuda-check/setup.sh and pass --venv")


class Nvrtc:
    """Minimal ctypes binding of NVRTC: source -> PTX, or ToolError with the program log."""

    def __init__(self, path):
        """Load libnvrtc.so from the wheel."""
        self.lib = ctypes.CDLL(path)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def _check(self, status, what):
        """Turn a non-zero nvrtcResult into a ToolError."""
        if status != 0:
            raise ToolError(f"{what}: {self.lib.nvrtcGetErrorString(status).decode()}")

    def compile(self, source, name, options):
        """Compile one translation unit; return its PTX text."""
        lib, prog = self.lib, ctypes.c_void_p()
        self._check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(),
                                           0, None, None), "nvrtcCreateProgram")
        try:
            opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
            status = lib.nvrtcCompileProgram(prog, len(options), opts)
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            if status != 0:
                raise ToolError(f"NVRTC failed on {name} ({' '.join(options)}):\n"
                                f"{log.value.decode(errors='replace')}")
            self._check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
            ptx = ctypes.create_string_buffer(size.value)
            self._check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
            return ptx.value.decode()
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


def nvrtc_options(arch, includes, extra):
    """Options mirroring cubecl-cuda 0.10 (arch, include paths, -lineinfo), but emitting PTX."""
    opts = [f"--gpu-architecture={arch.replace('sm_', 'compute_')}", "--std=c++17", "-lineinfo"]
    return opts + [f"--include-path={d}" for d in includes] + list(extra)


def pick_entry(ptx, wanted):
    """Return the PTX entry name: `wanted` itself or its C++-mangled form, else the only one."""
    entries = re.findall(r"\.entry\s+([\w$]+)\s*\(", ptx)
    if wanted:
        hits = [e for e in entries if e == wanted or
                (e.startswith("_Z") and f"{len(wanted)}{wanted}" in e)]
    else:
        hits = entries
    if len(hits) != 1:
        raise ToolError(f"entry {wanted or '(unnamed)'}: expected one match in {entries}")
    return hits[0]


def run(cmd):
    """Run a tool, return stdout+stderr; raise ToolError with its output when it fails."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout + proc.stderr


def parse_ptxas(text, entry):
    """Pull regs, spill stores/loads, stack frame and static smem of `entry` from ptxas -v."""
    stats, current = {}, None
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$]+)'?", line)
        if m:
            current = m.group(1)
            continue
        if current != entry:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m:
            stats.update(stack=int(m[1]), spill_st=int(m[2]), spill_ld=int(m[3]))
        m = re.search(r"Used (\d+) registers", line)
        if m:
            stats["regs"] = int(m[1])
            sm = re.search(r"(\d+) bytes smem", line)
            stats["smem"] = int(sm[1]) if sm else 0
    if "regs" not in stats:
        raise ToolError(f"no ptxas -v statistics for {entry}:\n{text}")
    stats.setdefault("stack", 0), stats.setdefault("spill_st", 0), stats.setdefault("spill_ld", 0)
    return stats


def is_work(op):
    """True for the instructions that make a loop the hot one: global loads and tensor-core ops."""
    base = op.split(".")[0]
    return load_width(op) is not None or base in TC_OPS or base == "LDSM" or "UTMALDG" in base


def main_loop(instrs):
    """Pick the loop (target..backward BRA) with the most work, then most instructions.

    Work = global loads + tensor-core/LDSM instructions inside the address range, so an
    unrolled reduction or store loop in the epilogue does not beat a smaller loop that
    streams tiles; nested loops lie inside their outer loop's range, so the outer one wins.
    Returns (start, end) addresses or None when the function has no backward branch.
    """
    ends = {}
    for ins in instrs:
        t = sass_paths.target(ins)
        if t is not None and t < ins.addr:
            ends[t] = max(ends.get(t, 0), ins.addr)
    best, best_key = None, None
    for start, end in ends.items():
        body = [i.op for i in instrs if start <= i.addr <= end]
        key = (sum(map(is_work, body)), len(body))
        if best_key is None or key > best_key:
            best, best_key = (start, end), key
    return best


def load_width(op):
    """Bytes moved per thread by a global load opcode (LDG, LDGSTS), None for anything else."""
    parts = op.split(".")
    if parts[0] not in GLOBAL_LOADS:
        return None
    for mod, width in (("U8", 1), ("S8", 1), ("U16", 2), ("S16", 2),
                       ("64", 8), ("128", 16), ("256", 32)):
        if mod in parts[1:]:
            return width
    return 4


def inspect_loop(instrs, loop):
    """Count tensor-core/LDSM instructions and find global-load widths inside the loop."""
    body = [i.op for i in instrs if loop is None or loop[0] <= i.addr <= loop[1]]
    counts, widths, generic = {}, [], 0
    for op in body:
        base = op.split(".")[0]
        if base in TC_OPS or base == "LDSM" or base.startswith("UTMALDG"):
            counts[base] = counts.get(base, 0) + 1
        w = load_width(op)
        if w is not None:
            widths.append((w, op))
        generic += base == "LD"
    return dict(loop=loop, instrs=len(body), counts=counts, generic=generic,
                widest=max(widths) if widths else None,
                scalar=sorted({op for w, op in widths if w <= 2}))


def occupancy(regs, threads, smem_total, arch):
    """Blocks per SM allowed by registers and by shared memory (cuda_occupancy.h rules)."""
    warps = -(-threads // 32)
    by_threads = min(MAX_BLOCKS, MAX_THREADS // threads) if threads else MAX_BLOCKS
    per_warp = -(-max(regs, 1) * 32 // REG_UNIT) * REG_UNIT
    hw_check = per_warp * (-(-warps // SUB_PARTITIONS) * SUB_PARTITIONS)
    if regs > MAX_REGS or hw_check > REGS_PER_SM:
        by_regs = 0
    else:
        warps_sm = (REGS_PER_SM // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS
        by_regs = min(by_threads, warps_sm // warps)
    lim = LIMITS[arch]
    alloc = -(-(smem_total + SMEM_RESERVED) // SMEM_UNIT) * SMEM_UNIT
    if smem_total > lim["smem_block"]:
        by_smem = 0
    else:
        by_smem = min(MAX_BLOCKS, lim["smem_sm"] // alloc)
    return by_regs, by_smem


def analyse(job, tk, nvrtc, extra_opts, keep):
    """Compile one manifest entry for one arch and collect every number the table shows."""
    index, entry, folder, arch = job
    src_path = os.path.join(folder, entry["file"])
    with open(src_path) as f:
        source = f.read()
    ptx = nvrtc.compile(source, entry["file"], nvrtc_options(arch, tk["includes"], extra_opts))
    name = pick_entry(ptx, entry.get("entry"))
    work = keep or tempfile.mkdtemp(prefix="cuda-check-")
    stem = os.path.join(work, f"{index:03d}.{os.path.splitext(entry['file'])[0]}.{arch}")
    with open(stem + ".ptx", "w") as f:
        f.write(ptx)
    log = run([tk["ptxas"], "-v", f"--gpu-name={arch}", "-o", stem + ".cubin", stem + ".ptx"])
    stats = parse_ptxas(log, name)
    sass = run([tk["cuobjdump"], "-sass", stem + ".cubin"])
    if keep:
        with open(stem + ".sass", "w") as f:
            f.write(sass)
    else:
        for ext in (".ptx", ".cubin"):
            os.remove(stem + ext)
        os.rmdir(work)
    instrs = sass_paths.parse_sass(sass, name)
    if not instrs:
        raise ToolError(f"no SASS found for {name}")
    # A manifest entry with "whole": true (a probe: straight-line code around its copies) is
    # judged over its whole function, as one without a loop is.
    loop = inspect_loop(instrs, None if entry.get("whole") else main_loop(instrs))
    shared = stats["smem"] + entry.get("shared_bytes", 0)
    by_regs, by_smem = occupancy(stats["regs"], entry["threads"], shared, arch)
    tc_loops = sass_paths.loop_figures(instrs)
    return dict(entry=entry, arch=arch, name=name, shared=shared, by_regs=by_regs,
                by_smem=by_smem, tc_loops=tc_loops,
                per_mma=sass_paths.kernel_figures(tc_loops), **stats, **loop)


def violations(r):
    """The rules this result breaks, as (key, message) pairs (empty when it is fine).

    The key names the kernel, variant, arch and rule without the figures, so that a list of
    known violations (--known) still matches after a change moves the numbers.
    """
    e, who, out = r["entry"], f"{r['entry']['kernel']} [{r['entry']['variant']}] {r['arch']}", []
    if e.get("hot") and (r["spill_st"] or r["spill_ld"] or r["stack"]):
        out.append((f"{who}: spills", f"{who}: hot kernel spills {r['spill_st']}/"
                    f"{r['spill_ld']} B, stack {r['stack']} B"))
    if e.get("tensor_core") and not any(r["counts"].get(op) for op in TC_OPS):
        out.append((f"{who}: no tensor-core instructions",
                    f"{who}: tensor_core kernel has no HMMA/HGMMA/IMMA in its main loop"))
    if r["scalar"]:
        out.append((f"{who}: scalar loads", f"{who}: scalar 1/2-byte global loads in main "
                    f"loop: {', '.join(r['scalar'])}"))
    ceiling, (whole, masked) = e.get("max_per_mma"), r["per_mma"]
    if ceiling and (whole is None or whole > ceiling[0] or masked > ceiling[1]):
        out.append((f"{who}: instructions per HMMA", f"{who}: {figure(whole)} / "
                    f"{figure(masked)} SASS instructions per HMMA on the whole-tile / masked "
                    f"path, over the ceiling of {ceiling[0]} / {ceiling[1]}"))
    narrow = sum(loop["narrow_shared"] for loop in r["tc_loops"])
    if e.get("native_fragments") and narrow:
        out.append((f"{who}: narrow shared loads", f"{who}: {narrow} 1- or 2-byte shared "
                    f"loads in its tensor-core loops (fragments not loaded by ldmatrix)"))
    cubes = min(r["by_regs"], r["by_smem"])
    if cubes < e.get("min_cubes_per_sm", 0):
        out.append((f"{who}: occupancy", f"{who}: {cubes} cubes/SM (regs {r['by_regs']}, "
                    f"shared {r['by_smem']}) < min_cubes_per_sm {e['min_cubes_per_sm']}"))
    return out


def read_known(path):
    """The keys of a known-violations file, one per line ('#' starts a comment), as (keys that
    must occur, keys marked '~' that may)."""
    if not path:
        return set(), set()
    with open(path) as f:
        keys = {line.split("#")[0].strip() for line in f} - {""}
    varying = {k for k in keys if k.startswith("~")}
    return keys - varying, {k[1:].strip() for k in varying}


def judge(results, known, varying):
    """Print the violations against the known list; return how many count as failures.

    A violation not in the list fails (a regression); so does a listed one that no longer
    occurs (the list must shrink with each fix, so it always says what is still owed), unless
    it is one that varies from run to run.
    """
    found = [v for r in results for v in violations(r)]
    new = [message for key, message in found if key not in known | varying]
    stale = sorted(known - {key for key, _ in found})
    owed = len(found) - len(new)
    if owed:
        print(f"\n{owed} known violation(s), listed in the known file (still owed)")
    if new:
        print(f"\n{len(new)} violation(s):")
        print("\n".join(f"- {v}" for v in new))
    if stale:
        print(f"\n{len(stale)} known violation(s) no longer occur: remove them from the list")
        print("\n".join(f"- {k}" for k in stale))
    if not new and not stale:
        print("no new violations")
    return len(new) + len(stale)


def figure(x):
    """A per-HMMA figure in a cell: two decimals, or a dash where the kernel has none."""
    return "–" if x is None else f"{x:.2f}"


def loop_table(results):
    """The tensor-core loops of every kernel with a ceiling on its instructions per HMMA: both
    paths' figures and what they issue."""
    head = ["kernel", "variant", "arch", "loop", "per HMMA: whole tile", "masked",
            "HMMA", "whole-tile path issues", "masked path issues"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        if not r["entry"].get("max_per_mma"):
            continue
        for loop in r["tc_loops"]:
            whole, masked = loop["whole"], loop["masked"]
            cells = [r["entry"]["kernel"], r["entry"]["variant"], r["arch"],
                     f"{loop['start']:#x}–{loop['end']:#x}", figure(whole["per_tc"]),
                     figure(masked["per_tc"]), f"{whole['tc']:g}",
                     sass_paths.describe(whole["hist"]), sass_paths.describe(masked["hist"])]
            rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def table(results):
    """Render all results as one markdown table."""
    head = ["kernel", "variant", "arch", "regs", "spill (bytes st/ld)", "stack", "shared/cube",
            "cubes/SM by regs", "by shared", "TC instr in main loop",
            "widest global load in main loop", "per HMMA: whole tile / masked"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        tc = " ".join(f"{op}×{n}" for op, n in sorted(r["counts"].items())) or "none"
        where = f"whole, {r['instrs']} instr" if r["loop"] is None else f"{r['instrs']} instr"
        if r["widest"]:
            wide = f"{r['widest'][0]} B ({r['widest'][1]})"
            if r["scalar"]:
                wide += f"; scalar 2-byte global loads: {', '.join(r['scalar'])}"
        else:
            wide = "none"
        if r["generic"]:
            wide += f" (+{r['generic']} generic LD)"
        cells = [r["entry"]["kernel"], r["entry"]["variant"], r["arch"], r["regs"],
                 f"{r['spill_st']}/{r['spill_ld']}", r["stack"], f"{r['shared']} B",
                 r["by_regs"], r["by_smem"], f"{tc} ({where})", wide,
                 f"{figure(r['per_mma'][0])} / {figure(r['per_mma'][1])}"]
        rows.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows) + "\n"


def parse_args(argv):
    """Command line: folder plus --markdown/--keep/--no-fail and toolkit location options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("folder", help="folder holding manifest.json and the .cu files")
    p.add_argument("--markdown", help="also write the table to this file")
    p.add_argument("--keep", help="keep .ptx/.cubin/.sass files in this folder")
    p.add_argument("--no-fail", action="store_true", help="report violations, exit 0")
    p.add_argument("--known", help="file of known violations (keys), which do not fail")
    p.add_argument("--write-known", help="write the current violations' keys here, exit 0")
    p.add_argument("--venv", default=os.environ.get("CUDA_CHECK_VENV"),
                   help="venv holding the NVIDIA wheels (default: $CUDA_CHECK_VENV, sys.path)")
    p.add_argument("--arch", action="append", choices=ARCHES, help="only these arches")
    p.add_argument("--nvrtc-opt", action="append", default=[], help="extra NVRTC option")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    return p.parse_args(argv)


def main(argv=None):
    """Analyse every (manifest entry, arch) pair in parallel, print the table, judge."""
    args = parse_args(argv)
    started = time.time()
    try:
        tk = find_toolkit(args.venv)
        nvrtc = Nvrtc(tk["nvrtc"])
        with open(os.path.join(args.folder, "manifest.json")) as f:
            manifest = json.load(f)
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
        jobs = [(i, e, args.folder, a) for i, e in enumerate(manifest)
                for a in (args.arch or ARCHES)]
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            results = list(pool.map(
                lambda j: analyse(j, tk, nvrtc, args.nvrtc_opt, args.keep), jobs))
    except (ToolError, OSError, KeyError, ValueError) as err:
        print(f"cuda-check: error: {err}", file=sys.stderr)
        return 2
    md = table(results) + "\n" + loop_table(results)
    print(md)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(md)
    print(f"{len(results)} kernel/arch pairs analysed in {time.time() - started:.1f} s "
          f"(NVRTC {os.path.basename(tk['nvrtc'])}, includes {' '.join(tk['includes'])})")
    if args.write_known:
        keys = sorted({key for r in results for key, _ in violations(r)})
        with open(args.write_known, "w") as f:
            f.write("".join(f"{key}\n" for key in keys))
        print(f"wrote {len(keys)} known violations to {args.write_known}")
        return 0
    failures = judge(results, *read_known(args.known))
    return 1 if failures and not args.no_fail else 0


if __name__ == "__main__":
    sys.exit(main())
