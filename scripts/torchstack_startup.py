"""Run at the start of every Python process in a torchstack image (torchstack-startup.pth in the venv).

Kubernetes' `command:` replaces the image's entry point, so what must hold for every process is set
where the interpreter starts, before user code and before torch loads OpenMP. Two rules, each only
where the user decided nothing:

- Threads follow the container's CPU budget. PyTorch sizes its pools from the CPUs it may run on
  (the affinity mask) and ignores a CFS quota (`docker run --cpus`, a Kubernetes CPU limit), so a
  pod limited to 4 CPUs of a 64-core node starts 64 threads and is throttled most of each period.
  Where the quota allows fewer CPUs than the mask holds, OMP_NUM_THREADS is set to the quota,
  rounded down, at least 1. A user's OMP_NUM_THREADS wins (so does torch.set_num_threads later);
  TORCHSTACK_FOLLOW_CPU_LIMIT=0 turns the rule off.
- torch.compile gets a scratch folder it can run code from. Inductor writes its kernels as shared
  objects into /tmp/torchinductor_<user> and loads them: a read-only root, or a /tmp mounted
  noexec (Docker's `--tmpfs /tmp`), breaks that. The first writable folder that allows exec
  becomes its cache (and TMPDIR, where no temporary folder is writable at all); if there is none,
  a torch.compile that dies of it ends with one line saying what it needs. Eager mode needs none.

`python3 -m torchstack_startup` prints what was decided and why (the banner shows it).
Standard library only, and it never raises: a failing hook would break every python3 in the image.
"""

from __future__ import annotations

import os
import sys

SWITCH = "TORCHSTACK_FOLLOW_CPU_LIMIT"  # "0" turns the thread rule off
MARK = "TORCHSTACK_OMP_NUM_THREADS"  # the OMP_NUM_THREADS this hook set (children work it out again)
SCRATCH_MARK = "TORCHSTACK_INDUCTOR_CACHE"  # the TORCHINDUCTOR_CACHE_DIR this hook set
OFF_VALUES = ("0", "off", "false", "no")
COMPILE_NEEDS = (
    "torchstack: torch.compile needs a writable folder that allows running code, and this container has none "
    "({why}): mount one (docker run --tmpfs /tmp:rw,exec, or a Kubernetes emptyDir volume at /tmp) or point "
    "TORCHINDUCTOR_CACHE_DIR at one; eager mode works without it"
)
# What a torch.compile without such a folder dies of: Inductor's kernel cannot be loaded from a noexec
# folder, or Python finds no temporary folder at all.
COMPILE_FAILURES = ("failed to map segment from shared object", "No usable temporary directory")

decision = "not run"  # what apply() decided about threads, for backend_info.py and the banner
scratch = "not run"  # what apply() decided about torch.compile's scratch folder


# The CPU budget ------------------------------------------------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as file:
            return file.read()
    except (OSError, UnicodeDecodeError):
        return None


def _own_cgroups(root: str) -> list[tuple[set[str], str]]:
    """This process's cgroups (/proc/self/cgroup): each hierarchy's controllers and path; cgroup v2's
    single hierarchy has no controllers listed."""
    groups = []
    for line in (_read(os.path.join(root, "proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            groups.append((set(filter(None, parts[1].split(","))), parts[2]))
    return groups


def _cgroup_mounts(root: str) -> list[tuple[str, str, str, set[str]]]:
    """The cgroup file systems mounted here (/proc/self/mountinfo): the cgroup path each shows (its
    root), where it is mounted, v1 or v2, and a v1 mount's controllers. Without mountinfo, the
    usual places: /sys/fs/cgroup for v2, /sys/fs/cgroup/cpu for v1."""
    text = _read(os.path.join(root, "proc/self/mountinfo"))
    if text is None:
        return [("/", "/sys/fs/cgroup", "v2", set()), ("/", "/sys/fs/cgroup/cpu", "v1", {"cpu"})]
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields or len(fields) < 5:
            continue
        tail = fields[fields.index("-") + 1 :]
        if len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        point = fields[4].replace("\\040", " ")
        mounts.append((fields[3], point, "v2" if tail[0] == "cgroup2" else "v1", set(tail[2].split(","))))
    return mounts


def _folders_up(root: str, mount_root: str, point: str, path: str) -> list[str]:
    """The folders of this process's cgroup and of each parent up to the mount's top, on this file system.
    A path outside what the mount shows (a container sees only its own cgroup) starts at the top."""
    top = os.path.join(root, point.lstrip("/"))
    inside = path == mount_root or path.startswith(mount_root.rstrip("/") + "/")
    relative = os.path.relpath(path, mount_root) if inside else "."
    start = os.path.normpath(os.path.join(top, relative))
    if relative.startswith("..") or not os.path.isdir(start):
        start = top
    folders = [start]
    while folders[-1] != top and folders[-1].startswith(top):
        folders.append(os.path.dirname(folders[-1]))
    return folders


def _v2_limit(folder: str) -> float | None:
    fields = (_read(os.path.join(folder, "cpu.max")) or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    quota, period = int(fields[0]), int(fields[1])
    return quota / period if quota > 0 and period > 0 else None


def _v1_limit(folder: str) -> float | None:
    quota, period = (_read(os.path.join(folder, name)) for name in ("cpu.cfs_quota_us", "cpu.cfs_period_us"))
    if quota is None or period is None:
        return None
    quota, period = int(quota), int(period)
    return quota / period if quota > 0 and period > 0 else None


def cpu_quota(root: str = "/") -> tuple[float, str] | None:
    """The CPUs this process's CFS quota allows, the smallest along its cgroup path up to the root
    (cgroup v2 cpu.max; v1 cpu.cfs_quota_us / cpu.cfs_period_us), and which file said so; None
    where no quota applies or none can be read."""
    groups = _own_cgroups(root)
    found = []
    for mount_root, point, version, controllers in _cgroup_mounts(root):
        if version == "v2":
            paths = [path for names, path in groups if not names]
            limit_of, file = _v2_limit, "cpu.max"
        elif "cpu" in controllers:
            paths = [path for names, path in groups if "cpu" in names]
            limit_of, file = _v1_limit, "cpu.cfs_quota_us"
        else:
            continue
        for path in paths[:1] or ["/"]:
            for folder in _folders_up(root, mount_root, point, path):
                try:
                    limit = limit_of(folder)
                except ValueError:
                    limit = None
                if limit is not None:
                    found.append((limit, f"cgroup {version} {os.path.join('/', os.path.relpath(folder, root))}/{file}"))
    return min(found) if found else None


def _cpus(limit: float) -> str:
    return f"{limit:g} CPU" + ("" if limit == 1 else "s")


def threads(env: dict[str, str], root: str = "/", affinity: int | None = None) -> tuple[int | None, str]:
    """The OpenMP thread count to set (None: leave it) and why, as one phrase."""
    if env.get(SWITCH, "").lower() in OFF_VALUES:
        return None, f"not following the CPU limit ({SWITCH}={env[SWITCH]})"
    user = env.get("OMP_NUM_THREADS")
    if user is not None and user != env.get(MARK):
        return None, f"OMP_NUM_THREADS={user}, as set by the user"
    if affinity is None:
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = os.cpu_count() or 1
    mask = f"{_cpus(affinity)} in the affinity mask"
    quota = cpu_quota(root)
    if quota is None:
        return None, f"{mask}, no CPU quota: torch's own choice"
    limit, where = quota
    if int(limit) >= affinity:
        return None, f"{mask}, within the CPU quota of {_cpus(limit)} ({where}): torch's own choice"
    chosen = max(1, int(limit))
    return chosen, f"OMP_NUM_THREADS={chosen} from the CPU quota of {_cpus(limit)} ({where}); {mask}; {SWITCH}=0 turns this off"


# torch.compile's scratch folder ----------------------------------------------------------------------


def _usable(folder: str) -> str | None:
    """Why a folder cannot hold code that runs, or None if it can."""
    if not folder or not os.path.isdir(folder):
        return "missing"
    if not os.access(folder, os.W_OK | os.X_OK):
        return "not writable"
    try:
        noexec = bool(os.statvfs(folder).f_flag & os.ST_NOEXEC)
    except OSError:
        return "unreadable"
    return "mounted noexec" if noexec else None


def scratch_folder(env: dict[str, str]) -> tuple[dict[str, str], str, bool]:
    """Variables to set for torch.compile's scratch, what was decided, and whether a usable folder exists."""
    if env.get("TORCHINDUCTOR_CACHE_DIR"):
        whose = "as chosen in a parent process" if env["TORCHINDUCTOR_CACHE_DIR"] == env.get(SCRATCH_MARK) else "as set by the user"
        return {}, f"TORCHINDUCTOR_CACHE_DIR={env['TORCHINDUCTOR_CACHE_DIR']}, {whose}", True
    tmp, home = env.get("TMPDIR") or "/tmp", env.get("HOME", "")
    candidates = [tmp, "/var/tmp", home, "/dev/shm"]
    reasons = {}
    for folder in candidates:
        reasons[folder] = _usable(folder)
        if reasons[folder] is None:
            break
    else:
        return {}, "; ".join(f"{folder}: {why}" for folder, why in reasons.items()), False
    if folder == tmp:
        return {}, f"{tmp} (Inductor's default)", True
    user = "".join(c if c.isalnum() or c in "-_." else "_" for c in env.get("USER", str(os.getuid())))
    cache = os.path.join(folder, ".cache" if folder == home else "", f"torchinductor_{user}")
    chosen = {"TORCHINDUCTOR_CACHE_DIR": cache, SCRATCH_MARK: cache}
    if reasons[tmp] in ("missing", "not writable") and reasons.get("/var/tmp") in ("missing", "not writable"):
        chosen["TMPDIR"] = folder  # no temporary folder at all: Python's tempfile would find none
    return chosen, f"TORCHINDUCTOR_CACHE_DIR={cache} ({tmp}: {reasons[tmp]})", True


def _explain_compile_failures(why: str):
    previous = sys.excepthook

    def hook(kind, error, trace):
        seen, text = error, ""
        while seen is not None and len(text) < 100_000:
            text += f"{seen}\n"
            seen = seen.__cause__ or seen.__context__
        if any(failure in text for failure in COMPILE_FAILURES):
            print(COMPILE_NEEDS.format(why=why), file=sys.stderr)
        else:
            previous(kind, error, trace)

    sys.excepthook = hook


def apply() -> None:
    """Set what the rules decide in this process's environment (so OpenMP and Inductor read it)."""
    global decision, scratch
    env = os.environ
    count, decision = threads(dict(env))
    if count is not None:
        env["OMP_NUM_THREADS"] = env[MARK] = str(count)
    elif env.get(MARK) is not None and env.get("OMP_NUM_THREADS") == env[MARK]:
        del env["OMP_NUM_THREADS"], env[MARK]  # inherited from a parent with a lower budget
    chosen, scratch, usable = scratch_folder(dict(env))
    env.update(chosen)
    if not usable:
        _explain_compile_failures(scratch)


def main() -> None:
    """What the copy the interpreter loaded at start-up decided (loaded now if it was not)."""
    import torchstack_startup as loaded

    print(f"threads: {loaded.decision}")
    print(f"torch.compile scratch: {loaded.scratch}")


if __name__ == "__main__":
    main()
else:
    try:
        apply()
    except Exception as error:  # noqa: BLE001 - never stop Python from starting
        decision = scratch = f"torchstack_startup failed: {error!r}"
