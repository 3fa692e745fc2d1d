"""The complex BLAS check (tests/image/final/complex_blas.py) catches what a wrong complex-dot
convention produces, and accepts the right answer: tested here without torch."""

import pytest

from tests.image.final import complex_blas as cb

A, B = cb.vector(1), cb.vector(2)
MA, MB = cb.matrix(3, cb.ROWS, cb.INNER), cb.matrix(4, cb.INNER, cb.COLS)
RIGHT = {
    "dot complex64": [cb.reference_dot(A, B, conjugate_first=False)],
    "vdot complex128": [cb.reference_dot(A, B, conjugate_first=True)],
    "mm complex64": [x for row in cb.reference_mm(MA, MB) for x in row],
}


def test_the_right_results_pass():
    assert cb.problems(RIGHT, cb.TOLERANCE) == []


def test_numbers_at_single_precision_pass_within_its_tolerance():
    rounded = {key: [complex(round(v.real, 5), round(v.imag, 5)) for v in values] for key, values in RIGHT.items()}
    rounded["vdot complex128"] = RIGHT["vdot complex128"]
    assert cb.problems(rounded, cb.TOLERANCE) == []


@pytest.mark.parametrize(
    "key, wrong, why",
    [
        # cdotu_ called with MKL's result-through-a-pointer convention on OpenBLAS: the result is
        # whatever the caller's variable held (zero-initialised here), or stack garbage.
        ("dot complex64", [0j], "result never written"),
        ("dot complex64", [complex(3.1e-38, -2.0e12)], "stack garbage"),
        # The conjugating and the plain dot swapped (cdotc_ for cdotu_).
        ("dot complex64", [cb.reference_dot(A, B, conjugate_first=True)], "conjugated"),
        ("vdot complex128", [cb.reference_dot(A, B, conjugate_first=False)], "not conjugated"),
        # Only the real part kept.
        ("vdot complex128", [complex(cb.reference_dot(A, B, True).real, 0)], "real part only"),
        ("mm complex64", [x.conjugate() for row in cb.reference_mm(MA, MB) for x in row], "conjugated product"),
    ],
)
def test_a_wrong_convention_is_named(key, wrong, why):
    found = cb.problems({**RIGHT, key: wrong}, cb.TOLERANCE)
    assert len(found) == 1 and found[0].startswith(f"{key}[0] = "), (why, found)
    assert "computed without BLAS" in found[0]


def test_a_deliberately_wrong_reference_fails_the_right_results(monkeypatch):
    monkeypatch.setattr(cb, "reference_dot", lambda a, b, conjugate_first: sum((x * y for x, y in zip(a, b, strict=True)), 0j))
    found = cb.problems(RIGHT, cb.TOLERANCE)
    assert [line.split("[")[0] for line in found] == ["vdot complex128"], found
