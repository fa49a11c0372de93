"""Rich rendering shared by the commands: statuses, times, file changes, one-line event summaries, a finished run."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

console = Console(highlight=False)
stderr = Console(stderr=True, highlight=False)

STATUS_STYLE = {
    "completed": "green",
    "running": "cyan",
    "starting": "cyan",
    "queued": "blue",
    "waiting": "yellow",
    "failed": "red",
    "interrupted": "yellow",
    "cancelled": "dim",
    "rolled_back": "magenta",
    "streaming": "cyan",
    "incomplete": "yellow",
    "pending": "yellow",
    "resolved": "green",
    "lost": "red",
}
TODO_MARK = {"pending": ("☐", "dim"), "in_progress": ("◐", "yellow"), "completed": ("☑", "green")}


def status_text(status: str | None) -> Text:
    return Text(status or "-", style=STATUS_STYLE.get(status or "", ""))


def when(value: str | None) -> str:
    return _dt(value).strftime("%H:%M:%S") if value else "-"


def _dt(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def took(start: str | None, end: str | None) -> str:
    return f"{(_dt(end) - _dt(start)).total_seconds():.2f}s" if start and end else "-"


def short(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def files_text(files: list[dict[str, Any]]) -> Text:
    out = Text()
    for i, f in enumerate(files):
        if i:
            out.append(", ")
        out.append(f["path"], style="bold")
        out.append(f" {f['change']} +{f.get('added', 0)}/-{f.get('removed', 0)}", style="dim")
    return out or Text("no changes", style="dim")


def summarise(event: str, data: dict[str, Any]) -> str:
    """One line about a durable event, for humans."""
    d = data
    match event:
        case "thread.created":
            return f"{d.get('title') or '(untitled)'} · {d.get('provider')} · workspace {d.get('workspace')}"
        case "thread.moved":
            return f"{d.get('from_volume')} → {d.get('to_volume')} ({d.get('reason')})"
        case "message.created":
            return f"{d.get('role')}: {short(d.get('text', ''), 60)}"
        case "message.delta" | "message.completed":
            return f"{d.get('message_id')} +{len(d.get('text', ''))} chars"
        case "run.queued":
            return f"{d.get('run_id')} #{d.get('ordinal')} {d.get('disposition')} on {d.get('provider')}"
        case "node.started":
            return f"{d.get('kind')} {d.get('title', '')}".strip()
        case "node.completed":
            return f"{d.get('status', 'completed')} {short(d.get('output') or '', 50)}".strip()
        case "plan.updated":
            return f"{d.get('kind')} ({len(d.get('items', []))} items)"
        case "checkpoint.captured":
            return (
                f"{d.get('scope', 'root')}/{d.get('ordinal')} {d.get('kind', 'run')} "
                f"{(d.get('commit') or '')[:10]} {len(d.get('files', []))} file(s)"
            ).strip()
        case "provider.attached":
            return f"{d.get('provider')} session {d.get('session_id')} on {d.get('host_id')}"
        case "request.opened":
            return f"{d.get('kind')}: {short(d.get('prompt', ''), 60)}"
        case "run.warning":
            return str(d.get("message", ""))
        case _:
            return " ".join(str(d[k]) for k in ("run_id", "status", "reason", "error") if d.get(k))


def print_run(run: dict[str, Any]) -> None:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim")
    table.add_column()
    table.add_row("run", Text.assemble((run["id"], "bold"), f" #{run['ordinal']} on {run['provider']}"))
    error = Text(f" · {run['error']}", "red") if run.get("error") else ""
    if run.get("waiting_reason"):  # L9.3: dispatched, waiting for a provider
        error = Text(f" · waiting for {run['waiting_reason']}", "yellow")
    table.add_row("status", status_text(run["status"]) + error)
    attempts = ", ".join(f"{a['number']}:{a['status']}" for a in run.get("attempts", []))
    table.add_row("attempts", attempts or "-")
    table.add_row("took", took(run.get("started_at"), run.get("ended_at")))
    ckpt = run.get("checkpoint")
    if ckpt:
        table.add_row("checkpoint", Text.assemble((ckpt.get("ref") or "-", "bold"), f" ({ckpt['status']})"))
        table.add_row("commit", ckpt.get("commit") or "-")
        table.add_row("files", files_text(ckpt.get("files", [])))
    console.print(table)
