"""Scaled dot product attention, the fused kernel every transformer uses, against its formula.

python3 sdpa.py [--batch 8] [--seq-len 512] [--benchmark]
"""

import math

import torch
from _bench import options, report, seconds_per_run
from torch.nn import functional as F

HEADS, HEAD_DIM = 8, 64


def attention_by_the_formula(q, k, v):
    """softmax(Q K^T / sqrt(d) + causal mask) V, step by step."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    future = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1) @ v


def main() -> None:
    args = options(__doc__.splitlines()[0], seq_len=128)
    torch.manual_seed(0)
    q, k, v = (torch.randn(args.batch, HEADS, args.seq_len, HEAD_DIM) for _ in range(3))
    with torch.inference_mode():
        fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(fused, attention_by_the_formula(q, k, v), rtol=1e-4, atol=1e-4)
    if args.benchmark:
        times = seconds_per_run(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), args.runs, args.warmup)
        report("sdpa", args, times, items=args.batch, seq_len=args.seq_len, heads=HEADS, head_dim=HEAD_DIM)
    else:
        print(f"sdpa: causal attention over {args.batch}x{HEADS} heads of {args.seq_len} tokens matches the formula")


if __name__ == "__main__":
    main()
