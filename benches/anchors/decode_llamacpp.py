"""llama.cpp anchor for swa-zoo's decoding speed on the CPU: the same checkpoint, converted to
GGUF in the same precision, decoding the same prompt's token ids greedily.

    python3 benches/anchors/decode_llamacpp.py convert --hf DIR --convert SCRIPT --out FILE
        [--outtype bf16|f16|f32|q8_0]
    python3 benches/anchors/decode_llamacpp.py time --gguf FILE --ids 1,2,3 [--new-tokens 256]
        [--threads 2] [--runs 3]

What a user would otherwise pick for CPU inference is llama.cpp; its Python package
`llama-cpp-python` builds it from source (`pip install llama-cpp-python gguf sentencepiece`).
`convert` runs llama.cpp's own `convert_hf_to_gguf.py` (`--convert`, from the same source: the
package's sdist holds it under `vendor/llama.cpp/`) on DIR. The checkpoints of
`decode_mistral.py make` have a byte-level BPE that the converter's table of known
pre-tokenizers does not list; it is written as the default one, which nothing here uses: `time`
feeds token ids, never text.

`time` loads FILE (`n_threads` = `--threads`, a context of prompt + new tokens) and, `--runs`
times, evaluates the prompt's ids in one batch (the prefill), then `--new-tokens` − 1 single-id
steps, each the argmax of the last logits (greedy, never stopping at `<eos>`). It prints ONE
JSON line on stdout: {"gguf", "threads", "prompt_tokens", "new_tokens", "prefill_ms" (best run),
"decode_ms_per_token" (median run), "decode_ms_per_token_runs", "tokens" (the last run's new
ids), "vmhwm_kib" (peak resident memory)}. Used only for benchmarks, never by the build or the
tests.
"""

import argparse
import json
import runpy
import sys
import time
from pathlib import Path

from measure import add_timing_flags, decode_report


def convert(args):
    """`convert`: DIR as a GGUF file of `--outtype`."""
    script = Path(args.convert).resolve()
    sys.path.insert(0, str(script.parent))
    from conversion import base  # llama.cpp's converter package, beside the script

    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "default"
    sys.argv = [str(script), args.hf, "--outtype", args.outtype, "--outfile", args.out]
    runpy.run_path(str(script), run_name="__main__")


def greedy_run(llm, ids, new_tokens):
    """One greedy generation: (prefill seconds, decode seconds per token, new ids). Without
    `logits_all` the package keeps no logits of its own: the argmax reads the context's last
    row, the only one computed."""
    import numpy as np

    def argmax():
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        return int(np.argmax(logits))

    llm.reset()
    start = time.perf_counter()
    llm.eval(ids)
    token = argmax()
    prefilled = time.perf_counter()
    tokens = [token]
    for _ in range(new_tokens - 1):
        llm.eval([token])
        token = argmax()
        tokens.append(token)
    done = time.perf_counter()
    return prefilled - start, (done - prefilled) / max(new_tokens - 1, 1), tokens


def time_decode(args):
    """`time`: the JSON line of greedy runs on args.gguf."""
    from llama_cpp import Llama

    ids = [int(i) for i in args.ids.split(",")]
    llm = Llama(model_path=args.gguf, n_ctx=len(ids) + args.new_tokens, n_batch=len(ids),
                n_threads=args.threads, n_threads_batch=args.threads, logits_all=False,
                verbose=False)
    runs = [greedy_run(llm, ids, args.new_tokens) for _ in range(args.runs)]
    print(json.dumps({"gguf": args.gguf, **decode_report(args, len(ids), runs)}))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    convert_args = commands.add_parser("convert", help="a checkpoint directory as GGUF")
    convert_args.add_argument("--hf", required=True)
    convert_args.add_argument("--convert", required=True, help="llama.cpp's convert_hf_to_gguf.py")
    convert_args.add_argument("--out", required=True)
    convert_args.add_argument("--outtype", choices=["bf16", "f16", "f32", "q8_0"], default="bf16")
    time_args = commands.add_parser("time", help="time greedy decoding with llama.cpp")
    time_args.add_argument("--gguf", required=True)
    time_args.add_argument("--ids", required=True, help="the prompt's token ids, comma-separated")
    add_timing_flags(time_args)
    args = parser.parse_args()
    convert(args) if args.command == "convert" else time_decode(args)


if __name__ == "__main__":
    main()
