"""Complex products through the image's BLAS against a reference computed without BLAS.

torch.dot, torch.vdot and torch.mm of complex tensors call BLAS (cdotu_/zdotc_, cgemm_). A torch built
with the wrong convention for BLAS's complex dot (PyTorch's BLAS_USE_CBLAS_DOT, decided by a probe
that must run on the build host: patches/torch/0001-use-cblas-dot-with-openblas.patch) returns
garbage from the dots; nothing else notices. The reference is plain Python arithmetic.

Run in the image by the final checks (`report(torch)`, inside the torch report's one process), or by
hand there: `python3 complex_blas.py`. The comparison itself is tested on the host
(tests/unit/test_complex_blas.py), where torch is not installed.
"""

from __future__ import annotations

# Inputs with every component non-zero and distinct, so a swapped conjugation, a real-only or a
# zero result each shows. Sizes above BLAS's small-size paths (torch calls BLAS from n = 1 on).
N = 37
ROWS, INNER, COLS = 5, 19, 4


def vector(seed: int, n: int = N) -> list[complex]:
    return [complex(i * (seed + 6) % 11 - 5.25 + seed / 3, i * (2 * seed + 3) % 13 - 6.5 + seed / 7) / 8 for i in range(n)]


def matrix(seed: int, rows: int, cols: int) -> list[list[complex]]:
    return [vector(seed + 3 * r, cols) for r in range(rows)]


def reference_dot(a: list[complex], b: list[complex], conjugate_first: bool) -> complex:
    return sum(((x.conjugate() if conjugate_first else x) * y for x, y in zip(a, b, strict=True)), 0j)


def reference_mm(a: list[list[complex]], b: list[list[complex]]) -> list[list[complex]]:
    columns = list(zip(*b, strict=True))
    return [[sum((x * y for x, y in zip(row, column, strict=True)), 0j) for column in columns] for row in a]


def disagreement(name: str, got: list[complex], want: list[complex], tolerance: float) -> str | None:
    """One line naming the first value that differs beyond `tolerance` (relative to the largest
    reference value), or None when all agree."""
    if len(got) != len(want):
        return f"{name}: {len(got)} values, expected {len(want)}"
    scale = max((abs(w) for w in want), default=1.0) or 1.0
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        if not abs(g - w) <= tolerance * scale:
            return f"{name}[{i}] = {g:.6g}, expected {w:.6g} (computed without BLAS)"
    return None


def problems(results: dict[str, list[complex]], tolerance: dict[str, float]) -> list[str]:
    """What disagrees with the reference, for results keyed "<op> <dtype>" (ops: dot, vdot, mm)."""
    a, b = vector(1), vector(2)
    ma, mb = matrix(3, ROWS, INNER), matrix(4, INNER, COLS)
    want = {
        "dot": [reference_dot(a, b, conjugate_first=False)],
        "vdot": [reference_dot(a, b, conjugate_first=True)],
        "mm": [x for row in reference_mm(ma, mb) for x in row],
    }
    found = []
    for key, got in sorted(results.items()):
        op, dtype = key.split()
        line = disagreement(key, got, want[op], tolerance[dtype])
        if line:
            found.append(line)
    return found


TOLERANCE = {"complex64": 1e-4, "complex128": 1e-10}


def report(torch) -> dict:
    """torch's complex dot, vdot and mm in complex64 and complex128, and what disagrees."""
    results: dict[str, list[complex]] = {}
    for dtype_name in TOLERANCE:
        dtype = getattr(torch, dtype_name)
        a, b = torch.tensor(vector(1), dtype=dtype), torch.tensor(vector(2), dtype=dtype)
        ma, mb = torch.tensor(matrix(3, ROWS, INNER), dtype=dtype), torch.tensor(matrix(4, INNER, COLS), dtype=dtype)
        results[f"dot {dtype_name}"] = [complex(torch.dot(a, b).item())]
        results[f"vdot {dtype_name}"] = [complex(torch.vdot(a, b).item())]
        results[f"mm {dtype_name}"] = [complex(x) for x in torch.mm(ma, mb).flatten().tolist()]
    return {"checked": sorted(results), "problems": problems(results, TOLERANCE)}


if __name__ == "__main__":
    import torch as _torch

    found = report(_torch)
    print("\n".join(found["problems"]) or f"complex BLAS agrees with the reference: {', '.join(found['checked'])}")
    raise SystemExit(1 if found["problems"] else 0)
