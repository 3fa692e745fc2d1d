"""scripts/torchstack_startup.py, the start-up hook of every Python process in a final image: the
thread count it derives from cgroup files laid out as hosts have them (under a fake root), and
torch.compile's scratch folder. The real cgroup v1 case (this host's engine) is an image check."""

import importlib.util
import os
import subprocess
import sys

import pytest

from torchstack.base import layout
from torchstack.making.render import SCRIPTS

SPEC = importlib.util.spec_from_file_location("torchstack_startup", SCRIPTS / "torchstack_startup.py")
startup = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(startup)

# How Docker shows cgroup v1 to a container (this host): its own cgroup, mounted at the top.
V1_CGROUP = "12:pids:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"
V1_MOUNTINFO = (
    "31 23 0:28 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n"
    "36 31 0:33 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid,nodev,noexec,relatime master:17 - cgroup cgroup rw,cpu,cpuacct\n"
    "37 31 0:34 /docker/abc /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n"
)
# A cgroup v2 host seen from a pod's container without a cgroup namespace: the whole tree.
V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate\n"
POD = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice/cri-containerd-abc.scope"


def fake_root(tmp_path, cgroup: str, mountinfo: str | None, files: dict[str, str]):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(cgroup)
    if mountinfo is not None:
        (tmp_path / "proc/self/mountinfo").write_text(mountinfo)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return str(tmp_path)


def test_cgroup_v1_quota_over_period(tmp_path):
    root = fake_root(
        tmp_path,
        V1_CGROUP,
        V1_MOUNTINFO,
        {
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "100000\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        },
    )
    assert startup.cpu_quota(root) == (1.0, "cgroup v1 /sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us")
    count, why = startup.threads({}, root, affinity=2)
    assert count == 1, why
    assert "from the CPU quota of 1 CPU" in why and "2 CPUs in the affinity mask" in why


def test_cgroup_v1_without_a_quota_leaves_torch_its_choice(tmp_path):
    root = fake_root(
        tmp_path,
        V1_CGROUP,
        V1_MOUNTINFO,
        {
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        },
    )
    assert startup.cpu_quota(root) is None
    assert startup.threads({}, root, affinity=2) == (None, "2 CPUs in the affinity mask, no CPU quota: torch's own choice")


def test_cgroup_v2_in_its_own_namespace_with_a_fractional_quota(tmp_path):
    """1.5 CPUs gives 1 thread: rounded down, so that the threads never exceed the budget."""
    root = fake_root(tmp_path, "0::/\n", V2_MOUNTINFO, {"sys/fs/cgroup/cpu.max": "150000 100000\n"})
    assert startup.cpu_quota(root) == (1.5, "cgroup v2 /sys/fs/cgroup/cpu.max")
    assert startup.threads({}, root, affinity=8)[0] == 1


def test_nested_cgroup_v2_limits_the_smallest_wins(tmp_path):
    """A container without a limit of its own, in a pod limited to 4 CPUs, in a slice of 8."""
    top = "sys/fs/cgroup"
    root = fake_root(
        tmp_path,
        f"0::/{POD}\n",
        V2_MOUNTINFO,
        {
            f"{top}/{POD}/cpu.max": "max 100000\n",
            f"{top}/{os.path.dirname(POD)}/cpu.max": "400000 100000\n",
            f"{top}/kubepods.slice/kubepods-burstable.slice/cpu.max": "max 100000\n",
            f"{top}/kubepods.slice/cpu.max": "800000 100000\n",
        },
    )
    assert startup.cpu_quota(root) == (4.0, f"cgroup v2 /{top}/{os.path.dirname(POD)}/cpu.max")
    assert startup.threads({}, root, affinity=64)[0] == 4
    # Fewer CPUs in the mask than the quota allows: torch follows the mask by itself.
    assert startup.threads({}, root, affinity=2)[0] is None


def test_cgroup_v2_max_everywhere_is_no_quota(tmp_path):
    root = fake_root(tmp_path, f"0::/{POD}\n", V2_MOUNTINFO, {f"sys/fs/cgroup/{POD}/cpu.max": "max 100000\n"})
    assert startup.cpu_quota(root) is None
    assert startup.threads({}, root, affinity=4)[0] is None


@pytest.mark.parametrize(
    "files",
    [
        {},  # no cgroup files at all
        {"sys/fs/cgroup/cpu.max/x": "a folder where the file should be"},  # unreadable
        {"sys/fs/cgroup/cpu.max": "a lot\n"},  # not two numbers
        {"sys/fs/cgroup/cpu.max": "many 100000\n"},  # not a number
    ],
)
def test_missing_or_unreadable_cgroup_files_fall_back_to_the_affinity_mask(tmp_path, files):
    root = fake_root(tmp_path, "0::/\n", V2_MOUNTINFO, files)
    assert startup.threads({}, root, affinity=3) == (None, "3 CPUs in the affinity mask, no CPU quota: torch's own choice")


def test_without_mountinfo_the_usual_places_are_read(tmp_path):
    root = fake_root(tmp_path, "0::/\n", None, {"sys/fs/cgroup/cpu.max": "200000 100000\n"})
    assert startup.cpu_quota(root) == (2.0, "cgroup v2 /sys/fs/cgroup/cpu.max")


def test_the_user_and_the_switch_decide_first(tmp_path):
    root = fake_root(tmp_path, "0::/\n", V2_MOUNTINFO, {"sys/fs/cgroup/cpu.max": "100000 100000\n"})
    assert startup.threads({"OMP_NUM_THREADS": "2"}, root, affinity=4) == (None, "OMP_NUM_THREADS=2, as set by the user")
    off = startup.threads({"TORCHSTACK_FOLLOW_CPU_LIMIT": "0"}, root, affinity=4)
    assert off == (None, "not following the CPU limit (TORCHSTACK_FOLLOW_CPU_LIMIT=0)")
    # What a parent process of the image set is worked out again (a child may have less).
    inherited = {"OMP_NUM_THREADS": "3", "TORCHSTACK_OMP_NUM_THREADS": "3"}
    assert startup.threads(inherited, root, affinity=4)[0] == 1


def test_the_scratch_is_tmp_where_it_allows_running_code(tmp_path):
    assert startup.scratch_folder({"TMPDIR": str(tmp_path)}) == ({}, f"{tmp_path} (Inductor's default)", True)
    assert startup.scratch_folder({"TORCHINDUCTOR_CACHE_DIR": "/data/inductor"})[0] == {}


def test_without_a_temporary_folder_the_home_holds_the_kernels(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    real = startup._usable
    monkeypatch.setattr(startup, "_usable", lambda folder: "not writable" if folder == "/var/tmp" else real(folder))
    env = {"TMPDIR": str(tmp_path / "missing"), "HOME": str(home), "USER": "torch"}
    chosen, why, usable = startup.scratch_folder(env)
    assert usable and chosen == {
        "TORCHINDUCTOR_CACHE_DIR": f"{home}/.cache/torchinductor_torch",
        "TORCHSTACK_INDUCTOR_CACHE": f"{home}/.cache/torchinductor_torch",
        "TMPDIR": str(home),  # no temporary folder at all: Python's tempfile would find none
    }, why
    assert why == f"TORCHINDUCTOR_CACHE_DIR={home}/.cache/torchinductor_torch ({tmp_path}/missing: missing)"
    # A child process (the same container) keeps what its parent chose, and says whose choice it is.
    inherited = startup.scratch_folder({**env, **chosen})
    assert inherited == ({}, f"TORCHINDUCTOR_CACHE_DIR={home}/.cache/torchinductor_torch, as chosen in a parent process", True)


def test_with_no_usable_folder_it_says_why_for_each(tmp_path, monkeypatch):
    monkeypatch.setattr(startup, "_usable", lambda folder: "mounted noexec" if folder == "/tmp" else "not writable")
    chosen, why, usable = startup.scratch_folder({"HOME": "/home/torch"})
    assert (chosen, usable) == ({}, False)
    assert why == "/tmp: mounted noexec; /var/tmp: not writable; /home/torch: not writable; /dev/shm: not writable"


def test_a_compile_that_dies_for_want_of_a_scratch_ends_with_one_line(capsys):
    previous = sys.excepthook
    seen = []
    sys.excepthook = lambda *args: seen.append(args)
    try:
        startup._explain_compile_failures("/tmp: mounted noexec; /var/tmp: not writable")
        try:
            raise RuntimeError("backend='inductor' raised") from OSError("x.so: failed to map segment from shared object")
        except RuntimeError as error:
            sys.excepthook(RuntimeError, error, error.__traceback__)
        assert capsys.readouterr().err == startup.COMPILE_NEEDS.format(why="/tmp: mounted noexec; /var/tmp: not writable") + "\n"
        other = ValueError("something else")
        sys.excepthook(ValueError, other, None)
        assert seen == [(ValueError, other, None)], "other errors keep Python's own report"
    finally:
        sys.excepthook = previous


def test_the_pth_file_runs_the_hook_in_a_new_interpreter(tmp_path):
    """A site folder holding the .pth and the module, as the image's venv does: a new python3 gets
    the decision in its environment, and `python3 -m torchstack_startup` reports it."""
    for name in ("torchstack-startup.pth", "torchstack_startup.py"):
        (tmp_path / name).write_bytes((SCRIPTS / name).read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "TORCHSTACK_", "TORCHINDUCTOR_"))}
    code = "import os, site, sys; site.addsitedir(sys.argv[1]); import torchstack_startup as t; print(t.decision)"
    shown = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, capture_output=True, text=True)
    assert shown.returncode == 0 and "affinity mask" in shown.stdout, shown.stderr
    off = subprocess.run([sys.executable, "-c", code, str(tmp_path)], env={**env, "OMP_NUM_THREADS": "5"}, capture_output=True, text=True)
    assert off.stdout.strip() == "OMP_NUM_THREADS=5, as set by the user", off.stderr


def test_the_warm_store_is_where_the_layout_says(monkeypatch):
    """scripts/torchstack_warm.py runs in the image with the standard library and torch only: its store is layout.WARM_DIR."""
    monkeypatch.delenv("TORCHSTACK_WARM_DIR", raising=False)
    spec = importlib.util.spec_from_file_location("torchstack_warm_copy", SCRIPTS / layout.WARM_MODULE)
    warm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(warm)
    assert str(warm.STORE) == layout.WARM_DIR
