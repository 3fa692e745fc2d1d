"""Models compiled ahead of time when the image is built, loaded warm by every new container.

A new container's first torch.compile call pays the whole compile. A model that `torch.export` takes
can instead be compiled once, at build time, into an AOTInductor package that the image carries;
a new container loads it and answers without compiling anything:

    # in a Dockerfile FROM a torchstack image (as root; the store is the image's):
    RUN python3 /app/export.py          # it calls torchstack_warm.bake("mymodel", model, example_args)

    # at run time, in the team's code:
    run, how = torchstack_warm.load("mymodel", model, example_args)   # how: "baked" or "compiled"

A package is stored under what must match where it runs: torch's version, Python's, the machine, the
vector instructions Inductor compiled for (`pick_vec_isa`) and the C++ compiler. `load` takes only a
package whose key equals this machine's; on any other (a node with other vector instructions, another
torch) it says so in one line and falls back to torch.compile, so the answer is right either way.
The fallback freezes the weights into the compiled graph, as the package has them (Inductor's
`freezing`, which applies where gradients are off, as in inference).
The package is unpacked in the image at build time: loading it writes nothing, and works under a
read-only root file system, any user id and a noexec /tmp.

    python3 -m torchstack_warm            what the store holds, and this machine's key
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

STORE = Path(os.environ.get("TORCHSTACK_WARM_DIR", "/opt/torchstack/warm"))
KEY_FILE = "key.json"


def _compiler() -> str:
    """The C++ compiler Inductor runs, by its version line ("none" where the image has none)."""
    for name in ("g++", "c++"):
        if shutil.which(name):
            done = subprocess.run([name, "--version"], capture_output=True, text=True, check=False)
            return done.stdout.splitlines()[0] if done.stdout else name
    return "none"


# The CPU features whose instructions Inductor's kernels may use (its VecISA classes, ATen's CPU
# capability), by /proc/cpuinfo's names. Read from the CPU, not from Inductor's own pick: that one
# compiles test programs, and gives another answer where no folder allows it (a restricted pod).
VECTOR_FEATURES = {
    "x86_64": (
        "avx2",
        "fma",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512_vnni",
        "avx512_bf16",
        "avx512_fp16",
        "avx_vnni",
        "amx_tile",
        "amx_bf16",
        "amx_int8",
        "amx_fp16",
    ),
    "aarch64": ("asimd", "asimddp", "asimdhp", "fphp", "bf16", "i8mm", "sve", "sve2", "svebf16", "svei8mm"),
    "s390x": ("vx", "vxe", "vxe2", "vxp", "nnpa"),
}


def _cpu() -> str:
    """ATen's CPU capability (SVE's vector length in it) and the vector features of VECTOR_FEATURES the CPU has."""
    import torch

    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith(("flags", "Features", "features")):
                    flags |= set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = VECTOR_FEATURES.get(platform.machine(), ())
    return " ".join([torch.backends.cpu.get_cpu_capability(), *sorted(f for f in wanted if f in flags)])


def key() -> dict[str, str]:
    """What a package must have been made for, on this machine."""
    import torch

    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu": _cpu(),
        "compiler": _compiler(),
    }


def _digest(found: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(found, sort_keys=True).encode()).hexdigest()[:16]


def folder_for(name: str, found: dict[str, str] | None = None) -> Path:
    return STORE / name / _digest(found or key())


@contextlib.contextmanager
def _working_files_in(work: str):
    """Inductor's working files (its cache, the build folder, locks, and its precompiled headers of
    hundreds of MB, whose folder torch 2.13 fixes at import under /tmp, whatever TORCHINDUCTOR_CACHE_DIR
    says) and Python's temporary files in `work` while baking, so that a build step leaves only the
    package: the image would otherwise ship /tmp/torchinductor_<user>."""
    saved = {name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TMPDIR")}
    saved_tempdir = tempfile.tempdir
    os.environ.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "inductor"), TMPDIR=work)  # compile workers inherit both
    tempfile.tempdir = work
    from torch._inductor import codecache  # after the above: its import makes the cache folder

    headers = {name: getattr(codecache, name) for name in ("_HEADER_DIR", "_HEADER_LOCK_DIR") if hasattr(codecache, name)}
    for name in headers:
        setattr(codecache, name, os.path.join(work, "precompiled_headers", *(["locks"] if "LOCK" in name else [])))
    try:
        yield
    finally:
        for name, value in headers.items():
            setattr(codecache, name, value)
        tempfile.tempdir = saved_tempdir
        with contextlib.suppress(OSError):  # the default cache folder torch's import made, if empty: nothing of the bake's is in it
            os.rmdir(codecache.default_cache_dir())
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def bake(name: str, model, args: tuple, kwargs: dict | None = None) -> Path:
    """Export `model` on the example inputs, compile it ahead of time with AOTInductor and store it,
    unpacked, under this machine's key; the folder it went to."""
    import torch

    found = key()
    target = folder_for(name, found)
    exported = torch.export.export(model, args, kwargs)
    # One working folder per name, never a random one: Inductor's generated code names its paths, and
    # its file names are hashes of that code, so that the same model makes the same package.
    work = os.path.join(tempfile.gettempdir(), f"torchstack-bake-{name}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    try:
        with _working_files_in(work):
            package = torch._inductor.aoti_compile_and_package(exported, package_path=os.path.join(work, "model.pt2"))
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            with zipfile.ZipFile(package) as archive:
                archive.extractall(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for source in target.glob("**/*.cpp"):  # the generated C++ the library was compiled from: not needed to load it
        source.unlink()
    _content_serialization_ids(target)
    (target / KEY_FILE).write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")
    print(f"torchstack_warm: {name}: compiled ahead of time into {target} for {found['cpu']}, torch {found['torch']}")
    return target


def _content_serialization_ids(target: Path) -> None:
    """The package's serialization id, which torch's writer draws at random, made from the package's
    content: a package says nothing its model does not. Loading the library never reads it."""
    for found in target.glob("**/.data/serialization_id"):
        content = hashlib.sha256()
        for path in sorted(p for p in target.rglob("*") if p.is_file() and p != found):
            content.update(str(path.relative_to(target)).encode() + b"\0" + path.read_bytes())
        found.write_text(str(int(content.hexdigest(), 16) % 10**40).zfill(40))


class _Baked:
    """A stored package's model, called as the exported module was (its pytree specs)."""

    def __init__(self, library: Path):
        import torch
        import torch.utils._pytree as pytree

        self._pytree = pytree
        self._runner = torch._C._aoti.AOTIModelContainerRunnerCpu(str(library), 1)
        in_spec, out_spec = self._runner.get_call_spec()
        self._in_spec, self._out_spec = pytree.treespec_loads(in_spec), pytree.treespec_loads(out_spec)

    def __call__(self, *args, **kwargs):
        import torch

        flat = [x for x in self._pytree.tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor)]
        return self._pytree.tree_unflatten(self._runner.run(flat), self._out_spec)


def _why_not(name: str, found: dict[str, str]) -> str | None:
    """Why no stored package of `name` fits this machine, or None if one does."""
    target = folder_for(name, found)
    stored = [json.loads(p.read_text()) for p in sorted((STORE / name).glob(f"*/{KEY_FILE}"))]
    if not stored:
        return f"no package in {STORE / name}"
    if (target / KEY_FILE).is_file() and json.loads((target / KEY_FILE).read_text()) == found:
        return None
    nearest = stored[0]
    differs = [f"{field} {nearest.get(field)!r}, here {value!r}" for field, value in found.items() if nearest.get(field) != value]
    return "made for another machine: " + "; ".join(differs)


def load(name: str, model=None, args: tuple | None = None):
    """The callable that answers for `name`, and how it came: ("baked", the stored package) where one
    was made for this machine, else ("compiled", torch.compile(model) with its weights frozen in, as
    the package has them), said in one line on stderr."""
    import torch

    found = key()
    why = _why_not(name, found)
    if why is None:
        library = next(folder_for(name, found).glob("**/*.wrapper.so"))
        return _Baked(library), "baked"
    if model is None:
        raise RuntimeError(f"torchstack_warm: {name}: {why}, and no model was given to compile instead")
    print(f"torchstack_warm: {name}: {why}; compiling it here with torch.compile instead", file=sys.stderr)
    return torch.compile(model, options={"freezing": True}), "compiled"


def main() -> None:
    print(f"this machine: {json.dumps(key(), sort_keys=True)}")
    for stored in sorted(STORE.glob(f"*/*/{KEY_FILE}")):
        print(f"{stored.parent.parent.name}: {json.dumps(json.loads(stored.read_text()), sort_keys=True)}")


if __name__ == "__main__":
    main()
