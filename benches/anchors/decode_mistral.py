"""Hugging Face anchor for swa-zoo's decoding speed: one random Mistral-shaped checkpoint that
both `swa-zoo generate --hf DIR` and transformers load, timed per token on the transformers side.

    python3 benches/anchors/decode_mistral.py make --out DIR [--seed 0] [--shape 50m|1b]
        [--dtype float32|bfloat16]
    python3 benches/anchors/decode_mistral.py time --model DIR [--prompt TEXT]
        [--prompt-tokens 64] [--new-tokens 256] [--threads 2] [--runs 3]
        [--device cpu|cuda] [--dtype float32|bfloat16] [--batch 1] [--cache dynamic|static]
        [--compile]

`make` writes a complete model directory, built here and never downloaded: a MistralForCausalLM
(`--shape 50m`: 6 layers, hidden 512, 8 heads, 2 KV heads, MLP 1536, about 50.9M parameters;
`--shape 1b`: TinyLlama's 22 layers, hidden 2048, 32 heads, 4 KV heads, MLP 5632, about 1.1B;
both with sliding window 256, vocabulary 32000, untied, stored in `--dtype`, float32 or
bfloat16, the type most published checkpoints have) with transformers' own random initialisation under
`torch.manual_seed(seed)`, weights ~ N(0, 0.05²) and norms 1 (config.json, model.safetensors,
generation_config.json), and its tokenizer (tokenizer.json, tokenizer_config.json), built as
tests/fixtures/hf/make_fixtures.py builds the fixtures' one: a byte-level BPE trained on
data/kjv.txt, `<pad>` = 0, `<bos>` = 1, `<eos>` = 2, and a post-processor that prepends `<bos>`
to every encoding with special tokens (what swa-zoo's `generate --hf` and transformers both
do). Training on the KJV stops short of 32000 ids (no pair is left to merge), so the vocabulary
is filled up with two-piece entries ("ĠtheyĠv", decoded " they v") that encoding never produces
(the byte-level pre-tokenizer never yields a space inside a piece) but that decode to text, so
that every id the model can emit is readable. The `<eos>` row of the LM head is zeroed: its
logit is always exactly 0, far below the largest of 32000 random logits, so greedy decoding
never ends early on either side. It prints the parameter count. It refuses (exit code 2) a
directory that already holds a config.json.

`time` loads DIR with transformers (eager attention, float32 whatever the file's type: a
bfloat16 checkpoint runs on its rounded weights, `--threads` intra-op threads; on `--device
cuda`, SDPA attention in `--dtype`, what a user of transformers gets there),
repeats the prompt text (default: one fixed English sentence), joined by spaces, until it is
long enough, and cuts it to exactly `--prompt-tokens` tokens, `<bos>` included, checking that
the cut text encodes to those very tokens. It prints that text to stderr, with the swa-zoo
command that receives the same tokens. Then, `--runs` times, it times a greedy generation of
`--new-tokens` tokens in a manual loop: the prefill (one forward pass over the prompt with the
cache and, as `generate` does, the logits of its last position only, up to the argmax of the
first new token) and the decode (every further single-token step with the cached keys and
values, argmax included), never stopping at `<eos>`. `--batch` rows decode the same prompt
at once (ms per step, not per row). `--cache static` decodes with transformers' StaticCache
(every step of one shape), and `--compile` (which implies it) runs the model's forward under
`torch.compile(mode="reduce-overhead")`, CUDA graphs included on CUDA; the first run (the
compilation's) is then left out of the medians. On CUDA every time is taken after a
synchronisation. It prints ONE JSON line on stdout:
    {"model", "params", "threads", "prompt_tokens", "new_tokens", "prefill_ms" (best run),
     "decode_ms_per_token" (median run), "decode_ms_per_token_runs", "weight_bytes_per_token"
     (f32 bytes of every parameter but the input embedding table: what one decode step reads),
     "tokens" (the last run's new ids), "text" (their decoding, special tokens left out, as
     swa-zoo prints it after the prompt), "prompt", "vmhwm_kib" (peak resident memory)}
Used only for benchmarks, never by the build or the tests.
"""

import argparse
import inspect
import itertools
import json
import math
import shlex
import sys
from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from measure import add_timing_flags, clock, decode_report, positive

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "data" / "kjv.txt"
VOCAB = 32000
PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ["<pad>", "<bos>", "<eos>"]
MODEL_CONFIG = dict(
    vocab_size=VOCAB,
    sliding_window=256,
    max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    # Weights ~ N(0, 0.05²): at the default 0.02 greedy decoding falls at once into a one- or
    # two-token loop, which would make equal tokens on both sides prove little.
    initializer_range=0.05,
    pad_token_id=PAD,
    bos_token_id=BOS,
    eos_token_id=EOS,
)
# The sizes of `--shape` beside MODEL_CONFIG's.
SHAPES = {
    "50m": dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=6,
                num_attention_heads=8, num_key_value_heads=2),
    "1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
               num_attention_heads=32, num_key_value_heads=4),
}
# What AutoTokenizer needs beside tokenizer.json to know the special tokens.
TOKENIZER_CONFIG = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>",
                    "eos_token": "<eos>", "pad_token": "<pad>", "model_max_length": 4096}
SENTENCE = ("The old farmer walked slowly across the wet field to count his sheep, "
            "while the children watched the storm clouds gather over the distant hills.")


# ---------------------------------------------------------------------------------------------
# make


def train_tokenizer():
    """The byte-level BPE of tests/fixtures/hf/make_fixtures.py, trained on the whole KJV for
    as many ids as it yields (fewer than VOCAB)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.read_text(encoding="utf-8").splitlines(), trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", BOS)]
    )
    return tokenizer


def fill_vocabulary(tokenizer):
    """`tokenizer` with its BPE vocabulary filled up to VOCAB ids by pairs of its earliest
    (most frequent) space-led lowercase pieces, without merges: encoding never yields them,
    decoding gives both pieces."""
    spec = json.loads(tokenizer.to_str())
    vocab = spec["model"]["vocab"]
    words = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])
             if t.startswith("Ġ") and t[1:].isalpha() and t[1:].islower()]
    missing = VOCAB - len(vocab)
    side = math.isqrt(missing - 1) + 1
    pairs = itertools.islice(itertools.product(words[:side], repeat=2), missing)
    for a, b in pairs:
        assert a + b not in vocab, f"{a + b} is already a token"
        vocab[a + b] = len(vocab)
    filled = Tokenizer.from_str(json.dumps(spec))
    assert filled.get_vocab_size() == VOCAB
    return filled


def make_model(seed, shape):
    """The random MistralForCausalLM of `shape`, with a zero `<eos>` row in its LM head."""
    torch.manual_seed(seed)
    config = transformers.MistralConfig(**{**MODEL_CONFIG, **SHAPES[shape]})
    model = transformers.MistralForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight[EOS].zero_()
    return model


def check_auto_tokenizer(out, tokenizer):
    """transformers' AutoTokenizer reads the directory to the same ids, `<bos>` first."""
    auto = transformers.AutoTokenizer.from_pretrained(out)
    assert auto(SENTENCE).input_ids == tokenizer.encode(SENTENCE).ids
    assert (auto.bos_token_id, auto.eos_token_id, auto.pad_token_id) == (BOS, EOS, PAD)


def make(args):
    """`make`: the checkpoint and tokenizer in args.out."""
    out = Path(args.out)
    if (out / "config.json").exists():
        print(f"{out} already holds a config.json: choose an empty directory", file=sys.stderr)
        sys.exit(2)
    tokenizer = fill_vocabulary(train_tokenizer())
    model = make_model(args.seed, args.shape).to(getattr(torch, args.dtype))
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(TOKENIZER_CONFIG, indent=2) + "\n")
    check_auto_tokenizer(out, tokenizer)
    params = sum(p.numel() for p in model.parameters())
    print(f"{out}: MistralForCausalLM, {params:,} parameters ({params / 1e6:.1f}M), "
          f"tokenizer of {tokenizer.get_vocab_size()} ids")


# ---------------------------------------------------------------------------------------------
# time


def cut_prompt(tokenizer, text, length):
    """The text, repeated (space-separated) until long enough, cut to `length` tokens (`<bos>`
    included), and its ids; fails when the cut text does not encode to exactly those ids."""
    if not text:
        sys.exit("--prompt is empty")
    whole = text
    while len(tokenizer.encode(whole).ids) < length:
        whole += " " + text
    ids = tokenizer.encode(whole).ids[:length]
    cut = tokenizer.decode(ids, skip_special_tokens=True)
    if tokenizer.encode(cut).ids != ids:
        sys.exit(f"cutting the prompt at {length} tokens splits a word ({cut[-20:]!r}): "
                 "choose another --prompt or --prompt-tokens")
    return cut, ids


def weight_bytes_per_token(model):
    """f32 bytes of what one decode step reads: every parameter but the input embedding table
    (which it reads one row of), unless that table is also the LM head."""
    table = model.get_input_embeddings().weight
    tied = table is model.get_output_embeddings().weight
    return 4 * sum(p.numel() for p in model.parameters() if tied or p is not table)


def cache_keyword(model):
    """The name the model's forward takes its cache under: `cache` from transformers 5.24,
    `past_key_values` before (the GPU machines' 5.17)."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


@torch.inference_mode()
def greedy_run(model, ids, new_tokens, batch=1, static=False):
    """One greedy generation of `batch` copies of the prompt: (prefill seconds, decode seconds
    per step, the first row's new ids)."""
    device, keyword = model.device, cache_keyword(model)
    prompt = torch.tensor([ids] * batch, device=device)
    kwargs = {"use_cache": True}
    if static:
        cache = transformers.StaticCache(config=model.config, max_cache_len=len(ids) + new_tokens)
        kwargs |= {keyword: cache, "cache_position": torch.arange(len(ids), device=device)}
    start = clock(device)
    out = model(input_ids=prompt, logits_to_keep=1, **kwargs)
    token = out.logits[:, -1].argmax(-1, keepdim=True)
    prefilled = clock(device)
    tokens = [token]
    for step in range(new_tokens - 1):
        if static:
            kwargs["cache_position"] = torch.tensor([len(ids) + step], device=device)
        else:
            kwargs[keyword] = getattr(out, "cache", None) or out.past_key_values
        out = model(input_ids=token, **kwargs)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(token)
    done = clock(device)
    decode = (done - prefilled) / max(new_tokens - 1, 1)
    return prefilled - start, decode, torch.cat(tokens, 1)[0].tolist()


def time_decode(args):
    """`time`: the JSON line of greedy runs on args.model."""
    torch.set_num_threads(args.threads)
    tokenizer = Tokenizer.from_file(str(Path(args.model) / "tokenizer.json"))
    prompt, ids = cut_prompt(tokenizer, args.prompt, args.prompt_tokens)
    print(f"prompt ({len(ids)} tokens with <bos>): {prompt}\nthe same tokens in swa-zoo:\n"
          f"  swa-zoo generate --hf {shlex.quote(args.model)} --prompt {shlex.quote(prompt)} "
          f"--tokens {args.new_tokens} --temperature 0", file=sys.stderr)
    cuda = args.device == "cuda"
    model = transformers.AutoModelForCausalLM.from_pretrained(
        args.model, dtype=getattr(torch, args.dtype),
        attn_implementation="sdpa" if cuda else "eager").to(args.device).eval()
    static = args.cache == "static" or args.compile
    if args.compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead")
    run = lambda: greedy_run(model, ids, args.new_tokens, args.batch, static)
    if args.compile:
        run()
    runs = [run() for _ in range(args.runs)]
    tokens = runs[-1][2]
    if EOS in tokens:
        print(f"warning: <eos> at new token {tokens.index(EOS)}: swa-zoo stops there",
              file=sys.stderr)
    print(json.dumps({
        "model": args.model,
        "device": args.device,
        "dtype": args.dtype,
        "batch": args.batch,
        "mode": "compile" if args.compile else args.cache,
        "params": sum(p.numel() for p in model.parameters()),
        **decode_report(args, len(ids), runs),
        "weight_bytes_per_token": weight_bytes_per_token(model),
        "text": tokenizer.decode(tokens, skip_special_tokens=True),
        "prompt": prompt,
    }))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make_args = commands.add_parser("make", help="write the random checkpoint")
    make_args.add_argument("--out", required=True)
    make_args.add_argument("--seed", type=int, default=0)
    make_args.add_argument("--shape", choices=sorted(SHAPES), default="50m")
    make_args.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    time_args = commands.add_parser("time", help="time greedy decoding with transformers")
    time_args.add_argument("--model", required=True)
    time_args.add_argument("--prompt", default=SENTENCE)
    time_args.add_argument("--prompt-tokens", type=positive, default=64)
    time_args.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    time_args.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    time_args.add_argument("--batch", type=positive, default=1)
    time_args.add_argument("--cache", choices=["dynamic", "static"], default="dynamic")
    time_args.add_argument("--compile", action="store_true")
    add_timing_flags(time_args)
    args = parser.parse_args()
    make(args) if args.command == "make" else time_decode(args)


if __name__ == "__main__":
    main()
