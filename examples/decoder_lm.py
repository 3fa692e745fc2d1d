"""A small decoder-only language model (random weights) generating tokens with a KV cache.

    python3 decoder_lm.py [--batch 1] [--new-tokens 64] [--benchmark]

Checks that each cached step's logits are those of the whole sequence computed at once.
"""

import torch
from _bench import options, report, seconds_per_run
from torch import nn
from torch.nn import functional as F


class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x, cache=None):
        b, t, w = x.shape
        q, k, v = (part.view(b, t, self.heads, w // self.heads).transpose(1, 2) for part in self.qkv(x).chunk(3, -1))
        if cache is not None:
            k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
        # A causal mask only while the queries are the whole sequence; one new token sees everything.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=cache is None and t > 1)
        return self.out(y.transpose(1, 2).reshape(b, t, w)), (k, v)


class Layer(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = Attention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x, cache=None):
        attended, cache = self.attention(self.norm1(x), cache)
        x = x + attended
        return x + self.mlp(self.norm2(x)), cache


class DecoderLM(nn.Module):
    """GPT-2's shape scaled down."""

    def __init__(self, vocab: int = 8192, width: int = 256, heads: int = 4, layers: int = 4, max_len: int = 1024):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(max_len, width)
        self.layers = nn.ModuleList(Layer(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids, caches=None, start: int = 0):
        x = self.tokens(ids) + self.positions(torch.arange(start, start + ids.shape[1]))
        new_caches = []
        for i, layer in enumerate(self.layers):
            x, cache = layer(x, None if caches is None else caches[i])
            new_caches.append(cache)
        return self.head(self.norm(x)), new_caches


def generate(model: DecoderLM, prompt: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decoding with the KV cache, the prompt once and then one token a step: the new
    tokens, and the logits each step chose from."""
    logits, caches = model(prompt)
    steps = [logits[:, -1:]]
    ids = [steps[-1].argmax(-1)]
    for _ in range(new_tokens - 1):
        logits, caches = model(ids[-1], caches, start=prompt.shape[1] + len(ids) - 1)
        steps.append(logits)
        ids.append(logits.argmax(-1))
    return torch.cat(ids, 1), torch.cat(steps, 1)


def main() -> None:
    args = options(__doc__.splitlines()[0], prompt_len=16, new_tokens=16)
    torch.manual_seed(0)
    model = DecoderLM().eval()
    prompt = torch.randint(0, 8192, (args.batch, args.prompt_len))
    with torch.inference_mode():
        ids, steps = generate(model, prompt, args.new_tokens)
        whole, _ = model(torch.cat([prompt, ids[:, :-1]], 1))
    torch.testing.assert_close(steps, whole[:, args.prompt_len - 1 :], rtol=1e-4, atol=1e-4)
    if args.benchmark:
        times = seconds_per_run(lambda: generate(model, prompt, args.new_tokens), args.runs, args.warmup)
        report(
            "decoder_lm",
            args,
            times,
            items=args.batch * args.new_tokens,
            unit="tokens",
            prompt_len=args.prompt_len,
            new_tokens=args.new_tokens,
        )
    else:
        print(
            f"decoder_lm: generated {args.new_tokens} token(s) for {args.batch} prompt(s) with a KV cache, "
            f"first ids {ids[0, :8].tolist()}; the same logits as without the cache"
        )


if __name__ == "__main__":
    main()
