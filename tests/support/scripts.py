"""Scripts for the scripted provider, shared by the lifecycle e2e tests."""

from __future__ import annotations

from typing import Any


def script(*steps: dict[str, Any], profile: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"steps": list(steps)}
    if profile is not None:
        out["profile"] = profile
    return out


def text(value: str, delay_ms: int = 0, chunk: int = 50) -> dict[str, Any]:
    return {"type": "text", "text": value, "chunk": chunk, "delay_ms": delay_ms}


HANG = {"type": "hang"}


def tool(name: str, delay_ms: int = 0) -> dict[str, Any]:
    return {"type": "tool", "name": name, "delay_ms": delay_ms}


def approval(prompt: str = "run ls?", kind: str = "command") -> dict[str, Any]:
    return {"type": "approval", "kind": kind, "prompt": prompt}


def question(prompt: str, options: list[str] | None = None) -> dict[str, Any]:
    return {"type": "question", "prompt": prompt, "options": options or []}


def write(path: str, content: str) -> dict[str, Any]:
    return {"type": "write_file", "path": path, "content": content}


def todo(*items: tuple[str, str]) -> dict[str, Any]:
    return {"type": "todo", "items": [{"text": t, "status": s} for t, s in items]}


def subagent(title: str, *steps: dict[str, Any]) -> dict[str, Any]:
    return {"type": "subagent", "title": title, "steps": list(steps)}
