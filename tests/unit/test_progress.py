"""The build's plain-console output (CI logs): one line per step, each naming its stage."""

from __future__ import annotations

from torchstack.reports.progress import BuildView, StageReport


def test_a_ci_log_names_each_steps_stage_and_keeps_the_instructions_brackets(tmp_path, capsys):
    report = StageReport(stage="final", image="torchstack-final:x", tags=[])
    with BuildView([report], tmp_path / "build.log", quiet=False) as view:
        progress = view.start(report)
        progress.step, progress.steps, progress.instruction = 3, 41, 'RUN [ -d /opt/venv ] && echo "[bold]"'
        view.line("final", "Step 3/41 : RUN ...")
        view.note("torchstack: warning: [dev] stage [red]not[/red] here")
    err = capsys.readouterr().err
    assert '[final] step 3/41: RUN [ -d /opt/venv ] && echo "[bold]"\n' in err, err
    assert "torchstack: warning: [dev] stage [red]not[/red] here\n" in err, err
