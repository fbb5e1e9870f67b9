"""llama.cpp anchor for swa-zoo's decoding speed on the CPU: the same checkpoint, converted to
GGUF in the same precision, decoding the same prompt's token ids greedily.

    python3 benches/anchors/decode_llamacpp.py convert --hf DIR --convert SCRIPT --out FILE
        [--outtype bf16|f16|f32|q8_0]
    python3 benches/anchors/decode_llamacpp.py time --gguf FILE --ids 1,2,3 [--new-tokens 256]
        [--threads 2] [--runs 3]
    python3 benches/anchors/decode_llamacpp.py perplexity --gguf FILE --text FILE [--tokens 2048]

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
ids), "vmhwm_kib" (peak resident memory)}. `perplexity` scores the first `--tokens` tokens of
`--text` in one context, as `examples/streaming_pretrained.rs --methods dense` streams them (the
BOS where the tokenizer adds one, then the text, in transformers' tokens of the file), and prints one JSON line with the mean loss and perplexity over positions p = 1 … tokens − 2
(each the loss of token p + 1 given tokens 0 … p). Used only for benchmarks, never by the build or the tests.
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


def perplexity(args):
    """`perplexity`: the JSON line of llama.cpp's perplexity on the first `--tokens` tokens of
    `--text` (the BOS where the file's tokenizer adds one, then the text, in transformers'
    tokens), each position predicted from every one before it in one context, evaluated
    `--batch` tokens at a time."""
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=args.gguf, n_ctx=args.tokens, n_batch=args.batch,
                n_threads=args.threads, n_threads_batch=args.threads, logits_all=True,
                verbose=False)
    text = Path(args.text).read_text(encoding="utf-8")
    # The ids swa-zoo streams: transformers' tokenizer of the GGUF file (which swa-zoo's reader
    # reproduces), not llama.cpp's own, which splits some texts otherwise.
    from transformers import AutoTokenizer

    gguf = Path(args.gguf)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    bos = [tokenizer.bos_token_id] if tokenizer.add_bos_token else []
    ids = (bos + tokenizer.encode(text, add_special_tokens=False))[:args.tokens]
    llm.reset()
    llm.eval(ids)
    logits = np.asarray(llm.scores[:len(ids)], dtype=np.float64)
    top = logits.max(axis=1, keepdims=True)
    log_z = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    # losses[p]: the loss of token p + 1 given tokens 0 … p, for p = 1 … tokens − 2 (the
    # positions the streaming example scores).
    losses = (log_z[:-1] - logits[np.arange(len(ids) - 1), ids[1:]])[1:]
    print(json.dumps({"gguf": args.gguf, "tokens": len(ids), "first_ids": ids[:8],
                      "positions": len(losses), "mean_loss": float(losses.mean()),
                      "perplexity": float(np.exp(losses.mean())),
                      "first_losses": [float(x) for x in losses[:4]]}))


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
    ppl_args = commands.add_parser("perplexity", help="llama.cpp's perplexity on a text's start")
    ppl_args.add_argument("--gguf", required=True)
    ppl_args.add_argument("--text", required=True)
    ppl_args.add_argument("--tokens", type=int, default=2048)
    ppl_args.add_argument("--batch", type=int, default=512)
    ppl_args.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    {"convert": convert, "time": time_decode, "perplexity": perplexity}[args.command](args)


if __name__ == "__main__":
    main()
