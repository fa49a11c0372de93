"""Orchestration never names a provider: what it may know of one is data the providers package declares
(``treadle.providers.registry``) and gives it in ``Ctx.providers``. Read every module of the core with ast: no
name (variable, function, class, argument, attribute) holds a provider's name, and no string but the one the
stored event format needs is one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.unit.domain_helpers import command, new_thread, run_command, send
from treadle.core.errors import BadRequest
from treadle.core.providers.catalogue import Catalogue, ProviderSpec
from treadle.core.thread.commands import CreateThread, SendMessage
from treadle.providers.acp.settings import PREFIX as ACP_PREFIX
from treadle.providers.registry import ADAPTERS, CATALOGUE, PROVIDERS, adapter_class

CORE = Path(__file__).resolve().parents[2] / "libs" / "treadle" / "core"
# (file, value): ThreadCreated is stored without its default values, so its default provider is stored format.
ALLOWED_STRINGS = {("thread/events.py", "scripted")}
WORDS = {spec.name.split("-")[0] for spec in CATALOGUE.providers}


def _docstrings(tree: ast.AST) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _names(node: ast.AST) -> list[str]:
    match node:
        case ast.Name(id=name) | ast.Attribute(attr=name) | ast.arg(arg=name):
            return [name]
        case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) | ast.ClassDef(name=name):
            return [name]
        case ast.keyword(arg=str(name)):
            return [name]
        case ast.alias(name=name, asname=asname):
            return [name, asname or ""]
    return []


def test_the_core_names_no_provider() -> None:
    assert WORDS >= {"scripted", "codex", "claude", "acp"}  # the scan knows what to look for
    found = []
    for path in sorted(CORE.rglob("*.py")):
        where = path.relative_to(CORE).as_posix()
        tree = ast.parse(path.read_text(), str(path))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                value = node.value
                named = CATALOGUE.known(value) or any(value == s.name for s in CATALOGUE.providers)
                if named and (where, value) not in ALLOWED_STRINGS:
                    found.append(f"{where}:{node.lineno} the string {value!r}")
            for name in _names(node):
                if WORDS & {part.lower() for part in re.split(r"[_.]", name)}:
                    found.append(f"{where}:{getattr(node, 'lineno', '?')} the name {name}")
    assert not found, "the core names providers:\n" + "\n".join(found)


def test_every_provider_has_an_adapter_and_the_acp_family_its_settings_prefix() -> None:
    for provider in PROVIDERS:
        assert provider.adapter.count(":") == 1
    assert set(ADAPTERS) == {p.spec.name for p in PROVIDERS if not p.spec.family}
    family = CATALOGUE.spec(ACP_PREFIX + "gemini")
    assert family is not None and family.family and family.name == ACP_PREFIX
    assert adapter_class("scripted-b") is adapter_class("scripted")


def test_L2_1_a_catalogue_that_lacks_the_provider_refuses_it_and_changes_nothing() -> None:
    """The same decision with the provider missing from the data it is given: a typed 400, no event."""
    state = new_thread(provider="codex")
    cmd = command(SendMessage(text="x"), thread=state.thread.id)
    before = state.seq
    with pytest.raises(BadRequest) as caught:
        run_command(state, cmd, Catalogue((ProviderSpec(name="claude"),)))
    assert caught.value.code == "invalid_provider" and "one of claude" in str(caught.value)
    assert state.seq == before and state.runs == []


@pytest.mark.parametrize("name", ["acp-", "acp-UPPER", "acp-" + "x" * 41, "acp-a/b", "codex ", "nope"])
def test_L1_1_a_name_outside_the_catalogue_is_refused(name: str) -> None:
    with pytest.raises(BadRequest) as caught:
        new_thread(provider=name)
    assert caught.value.code == "invalid_provider"
    assert "acp-<agent>" in str(caught.value)


def test_a_family_member_and_its_turn_options_follow_the_data() -> None:
    state = new_thread(provider="acp-gemini")
    with pytest.raises(BadRequest) as caught:
        send(state, script={"collaboration_mode": "plan"})
    assert caught.value.code == "invalid_script" and "takes no script" in str(caught.value)
    planning = Catalogue((ProviderSpec(name="x", turn_options="options", options={"m": ("p",)}, plan={"m": "p"}),))
    assert planning.plan_options("x") == {"m": "p"} and planning.plan_options("y") == {}
    created = CreateThread(title="t")
    assert created.provider == "scripted" and CATALOGUE.known(created.provider)  # the stored default is known
