"""Issue 25: the one shape of an approval — its action in Treadle's words, bounded — and the scripted provider's
approval and question steps that produce it (hostile scripts are refused, nothing played)."""

from __future__ import annotations

import pytest

from treadle.core import script as sc
from treadle.core.requests.model import MAX_DIFF_CHARS, FileEdit, action_prompt, clipped_diff


def test_the_prompt_words_the_action_itself():
    assert action_prompt(command="rm -rf ~", cwd="/srv/ws") == "Run `rm -rf ~` in /srv/ws"
    assert action_prompt(command="ls") == "Run `ls`"
    files = [
        FileEdit(path="/srv/ws/a.py", change="add"),
        FileEdit(path="/srv/ws/b.py"),
        FileEdit(path="/srv/ws/c.py", change="delete"),
        FileEdit(path="/srv/ws/d.py", change="move", move_to="/srv/ws/e.py"),
    ]
    assert action_prompt(files=files) == (
        "Create /srv/ws/a.py; Edit /srv/ws/b.py; Delete /srv/ws/c.py; Move /srv/ws/d.py to /srv/ws/e.py"
    )


def test_a_huge_diff_is_cut_at_a_line_end_and_says_so():
    diff = "".join(f"+line {i}\n" for i in range(100_000))
    cut = clipped_diff(diff)
    assert len(cut) < MAX_DIFF_CHARS + 100 and cut.startswith("+line 0\n")
    assert cut.endswith(f"[diff cut: {len(diff) - cut.index('[diff cut')} more characters]\n")
    assert clipped_diff("+small\n") == "+small\n"


def test_a_scripted_approval_with_an_action_and_options_with_descriptions_parse():
    script = sc.parse_script(
        {
            "steps": [
                {"type": "approval", "prompt": "list the files", "command": "rm -rf ~", "cwd": "/srv/ws"},
                {"type": "approval", "kind": "file_change", "files": [{"path": "a.py", "change": "add", "diff": "+x"}]},
                {
                    "type": "question",
                    "prompt": "which db?",
                    "options": ["pg", {"label": "sqlite", "description": "a file"}],
                },
            ]
        }
    )
    assert script is not None
    approval, edit, question = script.steps
    assert isinstance(approval, sc.Approval) and approval.command == "rm -rf ~"
    assert isinstance(edit, sc.Approval) and edit.files[0].change == "add"
    assert isinstance(question, sc.Question) and question.options[1] == sc.Option(label="sqlite", description="a file")


@pytest.mark.parametrize(
    "step",
    [
        {"type": "approval", "files": [{"path": "a.py", "change": "explode"}]},
        {"type": "approval", "files": [{"path": "a.py", "owner": "root"}]},
        {"type": "approval", "command": ["rm", "-rf"]},
        {"type": "question", "prompt": "q", "options": [{"label": "x", "colour": "red"}]},
        {"type": "question", "prompt": "q", "options": [{"description": "no label"}]},
    ],
)
def test_a_hostile_approval_or_question_step_is_refused_with_a_reason(step):
    with pytest.raises(ValueError, match="invalid script"):
        sc.parse_script({"steps": [step]})
