"""The session's CPU sampler (tests/cpu_use.py): what it reads from /proc and how it names programs."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.cpu_use import TICKS, CpuUse, process_ticks, program_of


def test_a_stat_line_is_read_after_the_name_whatever_the_name_holds():
    line = "42 (a (b) c) R 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0 9876 1000 10 0"
    assert process_ticks(line) == (9876, 300)


def test_programs_are_named_by_script_module_emulated_binary_or_executable():
    assert program_of("/usr/bin/python3.11", ["python3", "-u", "/work/build.py", "plan"]) == "python build.py"
    assert program_of("/work/.venv/bin/python3", ["python", "-m", "pytest", "-q"]) == "python -m pytest"
    assert program_of("/usr/libexec/qemu-binfmt/qemu-aarch64 (deleted)", ["/usr/bin/qemu", "/usr/bin/dpkg", "-i"]) == "qemu-aarch64 (dpkg)"
    assert program_of("/usr/bin/python3", ["python3", "-c", "print(1)"]) == "python -c"
    assert program_of("/usr/bin/dockerd", ["dockerd", "-H", "unix:///x"]) == "dockerd"


def test_a_busy_child_is_counted_under_its_program():
    use = CpuUse(interval=0.2)
    use.start()
    # 1.5 s of its own CPU, however long the machine's other work (the session's builds) makes it take.
    busy = "import time\nwhile time.process_time() < 1.5: pass"
    child = subprocess.Popen([sys.executable, "-c", busy])
    child.wait()
    time.sleep(0.1)
    use.stop()
    # Seen while it ran (it lived far longer than a look's interval): most of its 1.5 s of CPU; what it
    # used after the last look before it ended (one interval at most) is not seen.
    assert use.by_program["python -c"] / TICKS > 0.8, use.by_program
    lines = use.report()
    assert lines[0].startswith("machine busy") and lines[1].startswith("seen by program"), lines
    assert any(line.startswith("python ") for line in lines[2:]), lines
