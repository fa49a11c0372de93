"""Scripts for the scripted provider, shared by the lifecycle e2e tests."""

from __future__ import annotations


def script(*steps: dict, profile: str | None = None) -> dict:
    out: dict = {"steps": list(steps)}
    if profile is not None:
        out["profile"] = profile
    return out


def text(value: str, delay_ms: int = 0, chunk: int = 50) -> dict:
    return {"type": "text", "text": value, "chunk": chunk, "delay_ms": delay_ms}


HANG = {"type": "hang"}


def tool(name: str, delay_ms: int = 0) -> dict:
    return {"type": "tool", "name": name, "delay_ms": delay_ms}


def approval(prompt: str = "run ls?", kind: str = "command") -> dict:
    return {"type": "approval", "kind": kind, "prompt": prompt}


def question(prompt: str, options: list[str] | None = None) -> dict:
    return {"type": "question", "prompt": prompt, "options": options or []}


def write(path: str, content: str) -> dict:
    return {"type": "write_file", "path": path, "content": content}


def todo(*items: tuple[str, str]) -> dict:
    return {"type": "todo", "items": [{"text": t, "status": s} for t, s in items]}


def subagent(title: str, *steps: dict) -> dict:
    return {"type": "subagent", "title": title, "steps": list(steps)}
