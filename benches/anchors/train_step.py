"""PyTorch anchor for swa-zoo's training throughput: the same decoder, data and optimizer in torch.

Trains the model swa-zoo's `train` trains (models/src/decoder.rs, block.rs, mlp.rs;
attention/src/layers/norm.rs, self_attention.rs, rope.rs; docs/semantics.md §2, §4, §8): byte
embeddings, Transformer++ blocks with per-head causal sliding windows, RoPE and SwiGLU, a final
RMSNorm and an untied LM head; mean next-byte cross-entropy; Burn's per-parameter gradient
clipping; AdamW under the warmup-cosine schedule of training/src/schedule.rs; batches drawn from
the Book of Genesis exactly as training/src/loader.rs draws them.

    python3 benches/anchors/train_step.py --spec SPEC.json [--compile] [--threads 2]
        [--warmup 3] [--steps 20] [--full-run] [--show-first-offsets]
        [--device cpu|cuda] [--dtype float32|bfloat16|float16] [--attention sdpa|flex]

SPEC.json is written by the Rust bench (keys: name, vocab, d_model, layers, heads, kv_heads,
mlp_hidden, windows[layer][head], seq_len, batch, lr, min_lr_ratio, warmup_steps, total_steps,
weight_decay, grad_clip, adam_eps, beta1, beta2, norm_eps, rope_base, seed, checkpoint_every,
valid_batches, corpus, params; and, optional, scores[layer] = {"rope": bool, "sigmoid_beta":
β or null, "alibi": slopes per head or null}, for SWAT's layers: sigmoid scores σ(s + β)
without normalisation, ALiBi's −m_h·(i − j) added to the score, RoPE or not; without it every
layer is softmax with RoPE). A sigmoid layer runs a dense masked product (FlexAttention
always normalises with softmax); softmax layers with ALiBi add it in FlexAttention's score_mod
or to SDPA's float mask.

On `--device cuda` the model and batches live on the card and every time is taken after a
synchronisation. `--dtype bfloat16` (or float16) trains under torch.autocast in that type with
f32 weights, gradients and AdamW state (what swa-zoo's mixed precision keeps; float16 with
torch's dynamic GradScaler). `--attention flex` runs the windowed attention with FlexAttention:
one block mask per layer built at start (the layer's per-head windows as its mask_mod), and
`flex_attention` compiled on its own, as its users run it (uncompiled it is a reference
implementation); with `--compile` the whole loss is compiled around it.

Throughput mode (default) runs `--warmup` untimed steps, then `--steps` timed training steps
(batch, forward, loss, backward, clipping, AdamW, learning rate, zero_grad), and prints one JSON
line on stdout:
    {"name", "mode": "eager"|"compile", "threads", "params", "tokens_per_s", "ms_per_step",
     "vmhwm_kib", "first_step_s" (from the process's start to the end of the first step),
     "gpu_mib" (device memory the process holds after the timed steps, as nvidia-smi lists
     it, the reading swa-zoo's side takes too; null on the CPU)}
`--full-run` trains the run's steps in the order swa-zoo's Learner does (progress on stderr every
100 steps), then scores the validation split with the final weights, and prints the same line
with "valid_loss" (mean cross-entropy, nats) and "wall_s" (the whole run) added; its
"tokens_per_s" and "ms_per_step" cover all training steps, the first ones (and compilation)
included. It fails, naming both numbers, when the model's parameter count differs from
spec["params"]. Used only for benchmarks, never by the build or the tests.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from measure import clock, gpu_used_mib, vmhwm_kib

REPO = Path(__file__).resolve().parents[2]
MASK64 = (1 << 64) - 1
# SplitMix64's increment, and the start of the loader's key fold (training/src/loader.rs).
SPLITMIX_GAMMA = 0x9E3779B97F4A7C15
KEY_START = 0x243F6A8885A308D3
# Burn's clipping adds the dtype's smallest positive normal to the norm (burn-optim 0.21).
F32_TINY = torch.finfo(torch.float32).tiny


# ---------------------------------------------------------------------------------------------
# Data: training/src/corpus.rs, training/src/loader.rs, models/src/rng.rs


def splitmix64_mix(value):
    """SplitMix64::mix: the first output of a generator seeded with `value`."""
    z = (value + SPLITMIX_GAMMA) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def random_key(seed, epoch, step, row):
    """The key of row `row` of training step `step` of loader epoch `epoch`."""
    h = KEY_START
    for k in (seed, epoch, step, row):
        h = splitmix64_mix(h ^ k)
    return h


def split_corpus(path):
    """The 90/5/5 train and valid splits of the file's bytes (corpus.rs `split_bytes`)."""
    path = Path(path)
    data = (path if path.is_absolute() or path.exists() else REPO / path).read_bytes()
    n = len(data)
    train_end, valid_end = n * 9 // 10, n * 19 // 20
    tokens = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    return tokens[:train_end], tokens[train_end:valid_end]


def window_starts(tokens, seq_len, keys):
    """The first position of each window of `seq_len + 1` tokens: key modulo the room."""
    room = len(tokens) - (seq_len + 1) + 1
    return [key % room for key in keys]


def windows(tokens, seq_len, keys):
    """Inputs and targets `[rows, seq_len]` of the windows at `keys`."""
    rows = torch.stack([tokens[s : s + seq_len + 1] for s in window_starts(tokens, seq_len, keys)])
    return rows[:, :-1], rows[:, 1:]


def train_keys(spec, epoch, step):
    return [random_key(spec["seed"], epoch, step, row) for row in range(spec["batch"])]


def training_order(spec, count):
    """(loader epoch, step) of the first `count` training steps: a fresh run's Learner draws its
    first epoch as loader epoch 0 (the `epoch` counter starts at first_epoch = 0 and `iter`
    takes it with fetch_add), each epoch `checkpoint_every` steps."""
    return [divmod(k, spec["checkpoint_every"]) for k in range(count)]


def valid_batches(spec, tokens):
    """The Sequential loader's batches, cut to the windows that exist."""
    n, batch = spec["seq_len"], spec["batch"]
    count = min(spec["valid_batches"], max((len(tokens) - 1) // n // batch, 1))
    for step in range(count):
        yield windows(tokens, n, [(step * batch + row) * n for row in range(batch)])


# ---------------------------------------------------------------------------------------------
# Model. Linear layers keep torch's default init: kaiming_uniform_(a=√5) is U(±1/√fan_in), the
# same bound as Burn's default KaimingUniform with gain 1/√3 (√3 · 1/√3 · 1/√fan_in).
# nn.Embedding's default N(0, 1) is Burn's EmbeddingConfig default.


class RmsNorm(nn.Module):
    """x · (mean(x²) + ε)^(−½) · γ, γ starting at ones."""

    def __init__(self, width, eps):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        return x * (x.pow(2).mean(-1, keepdim=True) + self.eps).rsqrt() * self.gamma


def rope_tables(seq_len, head_dim, base):
    """cos and sin `[seq_len, head_dim]`: column k turns by position · base^(−2(k mod d/2)/d),
    computed in f64 and rounded to f32 as rope.rs does."""
    half = head_dim // 2
    inv_freq = torch.tensor([base ** (-2.0 * k / head_dim) for k in range(half)] * 2,
                            dtype=torch.float64)
    angles = torch.arange(seq_len, dtype=torch.float64)[:, None] * inv_freq
    return angles.cos().float(), angles.sin().float()


def rotate_half(x, cos, sin):
    """RoPE in the Llama / Hugging Face layout on `[batch, heads, seq, head_dim]`."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-second, first), dim=-1) * sin


def sliding_mask(windows_of_heads, seq_len):
    """`[1, H, N, N]`, True where head h's query i sees key j: i − W_h + 1 ≤ j ≤ i."""
    i = torch.arange(seq_len)[:, None]
    j = torch.arange(seq_len)[None, :]
    w = torch.tensor(windows_of_heads)[:, None, None]
    return ((j <= i) & (j > i - w)).unsqueeze(0)


def flex_block_mask(windows_of_heads, seq_len, device):
    """FlexAttention's block mask of a layer: head h's query i sees key j when
    i − W_h + 1 ≤ j ≤ i (the rule of `sliding_mask`)."""
    from torch.nn.attention.flex_attention import create_block_mask

    widths = torch.tensor(windows_of_heads, device=device)

    def visible(b, h, i, j):
        return (j <= i) & (j > i - widths[h])

    return create_block_mask(visible, B=None, H=len(windows_of_heads), Q_LEN=seq_len,
                             KV_LEN=seq_len, device=device)


FLEX_ATTENTION = None


def flex_attention():
    """`flex_attention` compiled once for the process."""
    global FLEX_ATTENTION
    if FLEX_ATTENTION is None:
        from torch.nn.attention.flex_attention import flex_attention as flex

        FLEX_ATTENTION = torch.compile(flex)
    return FLEX_ATTENTION


def alibi_bias(slopes, seq_len):
    """`[1, H, N, N]` f32: −m_h · (i − j), ALiBi's term of the score (docs/semantics.md §4)."""
    i = torch.arange(seq_len, dtype=torch.float32)[:, None]
    j = torch.arange(seq_len, dtype=torch.float32)[None, :]
    return (-torch.tensor(slopes, dtype=torch.float32)[:, None, None] * (i - j)).unsqueeze(0)


def sigmoid_attention(q, k, v, mask, bias, beta):
    """Σ_j σ(q·k_j/√d + bias + β) v_j over the visible keys, without normalisation (SWAT's
    sigmoid scores, docs/semantics.md §1), densely; GQA by repeating k and v."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + beta
    if bias is not None:
        scores = scores + bias.to(scores.dtype)
    return (torch.sigmoid(scores) * mask) @ v


class Attention(nn.Module):
    """q, k, v, o without bias; RoPE on q and k (unless the layer's scores say not); softmax at
    scale 1/√d_h under the layer's mask (a dense boolean mask for SDPA, or FlexAttention's
    block mask), with ALiBi when the layer has slopes, or SWAT's sigmoid scores."""

    def __init__(self, spec, windows_of_heads, scores=None, flex=False, device="cpu"):
        super().__init__()
        d, self.heads, self.kv_heads = spec["d_model"], spec["heads"], spec["kv_heads"]
        self.head_dim = d // self.heads
        self.query = nn.Linear(d, self.heads * self.head_dim, bias=False)
        self.key = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.value = nn.Linear(d, self.kv_heads * self.head_dim, bias=False)
        self.output = nn.Linear(self.heads * self.head_dim, d, bias=False)
        scores = scores or {}
        self.rope, self.beta = scores.get("rope", True), scores.get("sigmoid_beta")
        slopes = scores.get("alibi")
        bias = alibi_bias(slopes, spec["seq_len"]) if slopes else None
        self.register_buffer("bias", bias, persistent=False)
        self.block_mask = None
        if flex and self.beta is None:
            self.block_mask = flex_block_mask(windows_of_heads, spec["seq_len"], device)
            mask = torch.zeros(0, dtype=torch.bool)
        else:
            mask = sliding_mask(windows_of_heads, spec["seq_len"])
        self.register_buffer("mask", mask, persistent=False)

    def attend(self, q, k, v):
        """The layer's attention of rotated q, k and v `[batch, heads, N, d_h]`."""
        gqa = self.heads != self.kv_heads
        if self.beta is not None:
            return sigmoid_attention(q, k, v, self.mask, self.bias, self.beta)
        if self.block_mask is not None:
            score_mod = None
            if self.bias is not None:
                bias = self.bias[0]

                def score_mod(score, b, h, i, j):
                    return score + bias[h, i, j]

            return flex_attention()(q, k, v, score_mod=score_mod, block_mask=self.block_mask,
                                    enable_gqa=gqa)
        mask = self.mask
        if self.bias is not None:
            mask = self.bias.to(q.dtype).masked_fill(~self.mask, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    def split(self, x, heads):
        batch, n, _ = x.shape
        return x.view(batch, n, heads, self.head_dim).transpose(1, 2)

    def forward(self, x, cos, sin):
        q = self.split(self.query(x), self.heads)
        k = self.split(self.key(x), self.kv_heads)
        if self.rope:
            q, k = rotate_half(q, cos, sin), rotate_half(k, cos, sin)
        out = self.attend(q, k, self.split(self.value(x), self.kv_heads))
        return self.output(out.transpose(1, 2).flatten(2))


class GatedMlp(nn.Module):
    """SwiGLU: down(silu(gate(x)) · up(x)), without biases."""

    def __init__(self, d, hidden):
        super().__init__()
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    """Transformer++: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, spec, windows_of_heads, scores=None, flex=False, device="cpu"):
        super().__init__()
        self.attention_norm = RmsNorm(spec["d_model"], spec["norm_eps"])
        self.attention = Attention(spec, windows_of_heads, scores, flex, device)
        self.mlp_norm = RmsNorm(spec["d_model"], spec["norm_eps"])
        self.mlp = GatedMlp(spec["d_model"], spec["mlp_hidden"])

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class Decoder(nn.Module):
    """Embedding, the blocks, a final RMSNorm and the untied LM head: `[batch, N]` → logits."""

    def __init__(self, spec, flex=False, device="cpu"):
        super().__init__()
        d = spec["d_model"]
        self.embedding = nn.Embedding(spec["vocab"], d)
        scores = spec.get("scores") or [None] * len(spec["windows"])
        self.blocks = nn.ModuleList(Block(spec, w, sc, flex, device)
                                    for w, sc in zip(spec["windows"], scores))
        self.norm = RmsNorm(d, spec["norm_eps"])
        self.head = nn.Linear(d, spec["vocab"], bias=False)
        cos, sin = rope_tables(spec["seq_len"], d // spec["heads"], spec["rope_base"])
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x, self.cos, self.sin)
        return self.head(self.norm(x))


def mean_cross_entropy(model, inputs, targets):
    """Mean next-token cross-entropy over every position of the batch (language_model.rs)."""
    logits = model(inputs)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


# ---------------------------------------------------------------------------------------------
# Optimisation: burn-optim 0.21's per-tensor clipping and AdamW, training/src/schedule.rs.


def warmup_cosine(spec, k):
    """The learning rate of the k-th update, k = 1, 2, …: burn-train's Learner calls the
    scheduler's `step()` before each training step, so the first update uses step 1."""
    peak, warmup = spec["lr"], spec["warmup_steps"]
    floor = peak * spec["min_lr_ratio"]
    if k <= warmup:
        return peak * k / max(warmup, 1)
    progress = min(1.0, (k - warmup) / max(spec["total_steps"] - warmup, 1))
    return floor + 0.5 * (peak - floor) * (1.0 + math.cos(math.pi * progress))


@torch.no_grad()
def clip_each_gradient(params, max_norm):
    """Burn's `GradientClipping::Norm`, tensor by tensor (not torch's global clip_grad_norm_):
    grad · min(1, max_norm / (‖grad‖₂ + f32 tiny))."""
    grads = [p.grad for p in params]
    norms = torch.stack(torch._foreach_norm(grads))
    coefficients = (max_norm / (norms + F32_TINY)).clamp(max=1.0)
    torch._foreach_mul_(grads, list(coefficients.unbind()))


def adamw(spec, params):
    """Burn's AdamW (decay p·(1 − lr·λ) on every parameter, norms included, then the Adam step
    with ε added to √v̂), which is torch's AdamW. Fused: the same update in one kernel per tensor,
    the fastest torch has on the CPU."""
    return torch.optim.AdamW(
        params,
        lr=spec["lr"],
        betas=(spec["beta1"], spec["beta2"]),
        eps=spec["adam_eps"],
        weight_decay=spec["weight_decay"],
        fused=True,
    )


class Trainer:
    """The model, its loss (compiled or not) under autocast in `dtype` when that is a half
    type, the optimizer and the update count."""

    def __init__(self, spec, args):
        torch.manual_seed(spec["seed"])
        self.spec, self.device = spec, torch.device(args.device)
        flex = args.attention == "flex"
        self.model = Decoder(spec, flex, self.device).to(self.device)
        self.params = list(self.model.parameters())
        self.loss = torch.compile(mean_cross_entropy) if args.compile else mean_cross_entropy
        self.optimizer = adamw(spec, self.params)
        self.dtype = getattr(torch, args.dtype)
        half = self.dtype != torch.float32
        self.autocast = torch.autocast(self.device.type, dtype=self.dtype, enabled=half)
        self.scaler = torch.amp.GradScaler(enabled=self.dtype == torch.float16)
        self.updates = 0

    def param_count(self):
        return sum(p.numel() for p in self.params)

    def step(self, tokens, epoch, step):
        """One training step on batch `step` of loader epoch `epoch`; returns the loss tensor."""
        keys = train_keys(self.spec, epoch, step)
        inputs, targets = (t.to(self.device) for t in windows(tokens, self.spec["seq_len"], keys))
        with self.autocast:
            loss = self.loss(self.model, inputs, targets)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        clip_each_gradient(self.params, self.spec["grad_clip"])
        self.updates += 1
        for group in self.optimizer.param_groups:
            group["lr"] = warmup_cosine(self.spec, self.updates)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad()
        return loss

    @torch.no_grad()
    def valid_loss(self, tokens):
        """Mean of the per-batch mean losses over the validation batches, eagerly."""
        with self.autocast:
            losses = [mean_cross_entropy(self.model, i.to(self.device), t.to(self.device)).item()
                      for i, t in valid_batches(self.spec, tokens)]
        return sum(losses) / len(losses)


# ---------------------------------------------------------------------------------------------
# Runs and report.


def report(spec, args, params, steps, seconds, **extra):
    tokens = spec["batch"] * spec["seq_len"] * steps
    cuda = args.device == "cuda"
    line = {
        "name": spec["name"],
        "mode": "compile" if args.compile else "eager",
        "device": args.device,
        "dtype": args.dtype,
        "attention": args.attention,
        "threads": args.threads,
        "params": params,
        "tokens_per_s": tokens / seconds,
        "ms_per_step": seconds * 1e3 / steps,
        "vmhwm_kib": vmhwm_kib(),
        "gpu_mib": gpu_used_mib() if cuda else None,
        **extra,
    }
    print(json.dumps(line), flush=True)


def show_first_offsets(spec, tokens, count=3):
    """The first training windows on stderr, to compare with the Rust loader."""
    for epoch, step in [(0, 0), (0, 1), (1, 0)]:
        for row, start in enumerate(window_starts(tokens, spec["seq_len"],
                                                  train_keys(spec, epoch, step)[:count])):
            text = bytes(tokens[start : start + 24].tolist()).decode("utf-8", "replace")
            print(f"epoch {epoch} step {step} row {row} -> offset {start} {text!r}",
                  file=sys.stderr)


def throughput(spec, args, trainer, train, began):
    order = training_order(spec, args.warmup + args.steps)
    first_step_s = None
    for epoch, step in order[: args.warmup]:
        trainer.step(train, epoch, step)
        if first_step_s is None:
            first_step_s = clock(trainer.device) - began
    start = clock(trainer.device)
    for epoch, step in order[args.warmup :]:
        trainer.step(train, epoch, step)
    seconds = clock(trainer.device) - start
    report(spec, args, trainer.param_count(), args.steps, seconds, first_step_s=first_step_s)


def full_run(spec, args, trainer, train, valid, began):
    """All steps of the Learner's epochs (ceil(total / checkpoint_every) of checkpoint_every),
    or the first `--max-steps` of them, then the validation loss."""
    epochs = -(-spec["total_steps"] // spec["checkpoint_every"])
    count = epochs * spec["checkpoint_every"]
    if args.max_steps is not None:
        count = min(count, args.max_steps)
    start = time.perf_counter()
    for k, (epoch, step) in enumerate(training_order(spec, count), start=1):
        loss = trainer.step(train, epoch, step)
        if k % 100 == 0 or k == count:
            print(f"step {k}/{count} loss {loss.item():.4f} lr {warmup_cosine(spec, k):.3e} "
                  f"{time.perf_counter() - start:.1f}s", file=sys.stderr)
    seconds = time.perf_counter() - start
    valid_loss = trainer.valid_loss(valid)
    report(spec, args, trainer.param_count(), count, seconds,
           valid_loss=valid_loss, wall_s=time.perf_counter() - began)


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", required=True, help="the model and run, as JSON")
    parser.add_argument("--compile", action="store_true", help="torch.compile the loss")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--full-run", action="store_true", help="train the whole run, validate")
    parser.add_argument("--show-first-offsets", action="store_true",
                        help="print the first training windows' offsets on stderr")
    parser.add_argument("--max-steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    parser.add_argument("--attention", choices=["sdpa", "flex"], default="sdpa")
    return parser.parse_args()


def check_windows(spec):
    """One window per query head of every layer, as the Rust side writes them."""
    shape = [len(w) for w in spec["windows"]]
    if shape != [spec["heads"]] * spec["layers"]:
        sys.exit(f"train_step.py: windows has {shape} entries per layer, expected "
                 f"{spec['heads']} heads in each of {spec['layers']} layers")


def main():
    began = time.perf_counter()
    args = parse_args()
    spec = json.loads(Path(args.spec).read_text())
    check_windows(spec)
    torch.set_num_threads(args.threads)
    train, valid = split_corpus(spec["corpus"])
    if args.show_first_offsets:
        show_first_offsets(spec, train)
    trainer = Trainer(spec, args)
    if trainer.param_count() != spec["params"]:
        sys.exit(f"train_step.py: the torch model has {trainer.param_count()} parameters, "
                 f"the spec says {spec['params']}")
    if args.full_run:
        full_run(spec, args, trainer, train, valid, began)
    else:
        throughput(spec, args, trainer, train, began)


if __name__ == "__main__":
    main()
