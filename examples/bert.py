"""A BERT-style encoder (random weights) embedding token sequences; checked against float64.

python3 bert.py [--batch 8] [--seq-len 128] [--benchmark]
"""

import torch
from _bench import options, report, seconds_per_run
from torch import nn


class Encoder(nn.Module):
    """BERT-base's shape scaled down: token and position embeddings, pre-norm encoder layers, pooling."""

    def __init__(self, vocab: int = 30522, width: int = 256, heads: int = 4, layers: int = 4, max_len: int = 512):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(max_len, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)

    def forward(self, ids):
        positions = torch.arange(ids.shape[1], device=ids.device)
        hidden = self.encoder(self.tokens(ids) + self.positions(positions))
        return self.norm(hidden[:, 0])  # the [CLS] position, as a sentence embedding


def main() -> None:
    args = options(__doc__.splitlines()[0], seq_len=64)
    torch.manual_seed(0)
    model = Encoder().eval()
    ids = torch.randint(0, 30522, (args.batch, args.seq_len))
    with torch.inference_mode():
        embedding = model(ids)
        reference = model.double()(ids).float()
        model.float()
    torch.testing.assert_close(embedding, reference, rtol=1e-3, atol=1e-3)
    if args.benchmark:
        times = seconds_per_run(lambda: model(ids), args.runs, args.warmup)
        report("bert", args, times, items=args.batch, seq_len=args.seq_len)
    else:
        print(f"bert: {args.batch} sequence(s) of {args.seq_len} tokens -> embeddings {tuple(embedding.shape)}, matches float64")


if __name__ == "__main__":
    main()
