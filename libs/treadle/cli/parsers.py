"""The command line of the API commands (threads, messages, runs, requests, the queue, checkpoints, lineage,
the tenant's policy): one sub-command per operation, see ``operations.COMMANDS``."""

from __future__ import annotations

import argparse

from . import operations as ops
from .policy import MODES, add_policy_fields
from .threads import (
    cmd_send,
    cmd_steer,
    cmd_switch,
    cmd_threads_create,
    cmd_threads_list,
    cmd_threads_show,
    cmd_watch,
)


def _group(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help: str
) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return sub.add_parser(name, help=help).add_subparsers(dest="action", required=True, metavar="ACTION")


def _paged(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, help="items per page (1..200)")
    parser.add_argument("--cursor", help="the page after this cursor (printed as next_cursor)")
    parser.add_argument("--all", action="store_true", help="every page")


def _key(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--idempotency-key", help="repeat a write safely: the same key is the same request")


def _message(parser: argparse.ArgumentParser, *, mode: bool = True) -> None:
    parser.add_argument("thread")
    parser.add_argument("text")
    if mode:
        parser.add_argument("--mode", help="dispatch mode: auto (default), queue_after_active, steer_active, …")
    parser.add_argument("--model")
    parser.add_argument("--script", metavar="FILE.json", help="scripted-provider script ('-' for stdin)")
    parser.add_argument("--clean-context", action="store_true", help="a fresh provider thread with a full summary")
    parser.add_argument("--merge-back-from", metavar="THREAD", help="bring a fork's results home (L7)")
    _key(parser)
    parser.add_argument("--wait", action="store_true", help="show the run live and wait for it to end")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait with --wait (default 300)")
    parser.add_argument(
        "--no-input",
        action="store_true",
        help="never ask: exit 6 when the run waits for an answer (default: ask on the terminal or read stdin)",
    )


def add_api_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], api: argparse.ArgumentParser) -> None:
    threads = _group(sub, "threads", "app threads")
    tc = threads.add_parser("create", parents=[api], help="create a thread")
    tc.add_argument("--title")
    tc.add_argument("--provider", help="scripted (default), codex, claude or acp-<name>")
    tc.add_argument("--model")
    tc.add_argument("--runtime-mode", choices=MODES)
    tc.add_argument("--workspace", help="workspace path relative to the tenant's workspace root")
    _key(tc)
    tc.set_defaults(func=cmd_threads_create)
    tl = threads.add_parser("list", parents=[api], help="list threads, newest first")
    _paged(tl)
    tl.add_argument("--search", help="only threads whose title contains this, ignoring case")
    tl.add_argument(
        "--archived",
        choices=("exclude", "include", "only"),
        help="archived threads: left out (exclude, the default), listed too (include) or alone (only)",
    )
    tl.set_defaults(func=cmd_threads_list)
    ts = threads.add_parser("show", parents=[api], help="a thread's runs, messages, checkpoints and activity")
    ts.add_argument("thread")
    ts.add_argument("--activity", type=int, default=20, help="how many activity lines (default 20)")
    ts.add_argument("--runs", type=int, metavar="N", help="only the last N runs (all by default)")
    ts.set_defaults(func=cmd_threads_show)
    tr = threads.add_parser("rename", parents=[api], help="give a thread a new title (L1.3)")
    tr.add_argument("thread")
    tr.add_argument("title")
    _key(tr)
    tr.set_defaults(func=ops.cmd_threads_rename)
    for action, func, help in (
        ("archive", ops.cmd_threads_archive, "archive a thread: out of the default list, no new messages (L1.3)"),
        ("unarchive", ops.cmd_threads_unarchive, "unarchive a thread"),
    ):
        ta = threads.add_parser(action, parents=[api], help=help)
        ta.add_argument("thread")
        _key(ta)
        ta.set_defaults(func=func)
    td = threads.add_parser("delete", parents=[api], help="delete a thread and erase its data (L1.4)")
    td.add_argument("thread")
    td.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    _key(td)
    td.set_defaults(func=ops.cmd_threads_delete)

    send = sub.add_parser("send", parents=[api], help="send a message to a thread (starts or queues a run)")
    _message(send)
    send.add_argument("--provider", help="the provider of this run (switches the thread's provider)")
    send.add_argument("--target-run", metavar="RUN", help="the run a steer is meant for")
    send.set_defaults(func=cmd_send)
    steer = sub.add_parser("steer", parents=[api], help="steer the active run (natively, or by restarting it)")
    _message(steer, mode=False)
    steer.add_argument("--target-run", metavar="RUN", help="the run meant (refused if another is active)")
    steer.add_argument("--restart", action="store_true", help="interrupt and restart it even if it can steer")
    steer.set_defaults(func=cmd_steer)
    switch = sub.add_parser("switch", parents=[api], help="send the next message to another provider (L5)")
    _message(switch)
    switch.add_argument(
        "--to",
        required=True,
        metavar="PROVIDER",
        help="scripted, codex, claude or acp-<name> (an agent of TREADLE_ACP_AGENTS)",
    )
    switch.set_defaults(func=cmd_switch)

    watch = sub.add_parser("watch", parents=[api], help="stream a thread's events live (resumes by itself)")
    watch.add_argument("thread")
    watch.add_argument("--after", type=int, default=0, metavar="SEQ", help="start after this stream sequence")
    watch.add_argument("--no-input", action="store_true", help="do not ask for answers to runtime requests")
    watch.set_defaults(func=cmd_watch, interrupt_ok=True)

    runs = _group(sub, "runs", "runs: show, list, wait, interrupt, diff")
    rs = runs.add_parser("show", parents=[api], help="one run with its attempts, messages and checkpoint")
    rs.add_argument("run")
    rs.set_defaults(func=ops.cmd_runs_show)
    rl = runs.add_parser("list", parents=[api], help="a thread's runs")
    rl.add_argument("thread")
    _paged(rl)
    rl.set_defaults(func=ops.cmd_runs_list)
    rw = runs.add_parser("wait", parents=[api], help="wait for a run to end (exit 7 unless completed)")
    rw.add_argument("run")
    rw.add_argument("--timeout", type=float, default=300)
    rw.set_defaults(func=ops.cmd_runs_wait)
    ri = runs.add_parser("interrupt", parents=[api], help="interrupt a run (acknowledged now, ends later)")
    ri.add_argument("run")
    ri.add_argument("--no-destructive", action="store_true", help="never stop the provider session to do it")
    _key(ri)
    ri.set_defaults(func=ops.cmd_runs_interrupt)
    rd = runs.add_parser("diff", parents=[api], help="what a run changed (unified diff)")
    rd.add_argument("run")
    rd.add_argument("--max-bytes", type=int)
    rd.set_defaults(func=ops.cmd_runs_diff)

    nodes = _group(sub, "nodes", "execution nodes: interrupt, rollback")
    ni = nodes.add_parser("interrupt", parents=[api], help="interrupt the run a root-turn node belongs to")
    ni.add_argument("node")
    ni.add_argument("--no-destructive", action="store_true")
    _key(ni)
    ni.set_defaults(func=ops.cmd_nodes_interrupt)
    nr = nodes.add_parser("rollback", parents=[api], help="restore a child node's checkpoint (L10.6)")
    nr.add_argument("node")
    nr.add_argument("checkpoint")
    nr.add_argument("--thread")
    _key(nr)
    nr.set_defaults(func=ops.cmd_nodes_rollback)

    requests = _group(sub, "requests", "runtime requests: approvals and questions")
    ql = requests.add_parser("list", parents=[api], help="a thread's runtime requests")
    ql.add_argument("thread")
    ql.add_argument("--status", choices=["pending", "resolved", "not_resumable", "cancelled"])
    _paged(ql)
    ql.set_defaults(func=ops.cmd_requests_list)
    qa = requests.add_parser("answer", parents=[api], help="answer an approval or a question")
    qa.add_argument("request")
    qa.add_argument("--decision", choices=["accept", "accept_for_session", "decline", "cancel"])
    qa.add_argument("--answer", action="append", metavar="KEY=VALUE", help="a question's answer (repeat)")
    qa.add_argument("--message", help="a question's answer as text")
    _key(qa)
    qa.set_defaults(func=ops.cmd_requests_answer)

    messages = sub.add_parser("messages", parents=[api], help="a thread's messages")
    messages.add_argument("thread")
    _paged(messages)
    messages.set_defaults(func=ops.cmd_messages)
    activity = sub.add_parser("activity", parents=[api], help="a thread's activity feed")
    activity.add_argument("thread")
    activity.add_argument("--run")
    _paged(activity)
    activity.set_defaults(func=ops.cmd_activity)

    queue = _group(sub, "queue", "the runs waiting behind the active one")
    qq = queue.add_parser("list", parents=[api], help="the queue, in the order its runs will start")
    qq.add_argument("thread")
    qq.set_defaults(func=ops.cmd_queue_list)
    qr = queue.add_parser("reorder", parents=[api], help="name every queued run in its new order")
    qr.add_argument("thread")
    qr.add_argument("runs", nargs="+", metavar="RUN")
    _key(qr)
    qr.set_defaults(func=ops.cmd_queue_reorder)
    qe = queue.add_parser("edit", parents=[api], help="change a queued run's message before it starts")
    qe.add_argument("thread")
    qe.add_argument("run")
    qe.add_argument("text")
    qe.add_argument("--script", metavar="FILE.json")
    _key(qe)
    qe.set_defaults(func=ops.cmd_queue_edit)
    qc = queue.add_parser("cancel", parents=[api], help="cancel a queued run")
    qc.add_argument("thread")
    qc.add_argument("run")
    _key(qc)
    qc.set_defaults(func=ops.cmd_queue_cancel)

    plans = _group(sub, "plans", "proposed plans")
    pi = plans.add_parser("implement", parents=[api], help="implement a proposed plan as a run or a new thread")
    pi.add_argument("plan")
    pi.add_argument("--as", dest="as_", choices=["run", "thread"], default="run")
    _key(pi)
    pi.set_defaults(func=ops.cmd_plans_implement)

    checkpoints = sub.add_parser("checkpoints", parents=[api], help="a thread's checkpoints")
    checkpoints.add_argument("thread")
    _paged(checkpoints)
    checkpoints.set_defaults(func=ops.cmd_checkpoints)
    diff = sub.add_parser("diff", parents=[api], help="the change between two runs' checkpoints")
    diff.add_argument("thread")
    diff.add_argument("--from", dest="from_ordinal", type=int, metavar="N", help="a run ordinal (0: before run 1)")
    diff.add_argument("--to", dest="to_ordinal", type=int, metavar="N", help="a run ordinal (default: the latest)")
    diff.add_argument("--max-bytes", type=int)
    diff.set_defaults(func=ops.cmd_diff)
    rollback = sub.add_parser("rollback", parents=[api], help="roll a thread's files back to run N (L10.5)")
    rollback.add_argument("thread")
    rollback.add_argument("ordinal", type=int)
    rollback.add_argument("--interrupt-active", action="store_true", help="interrupt an active run first")
    _key(rollback)
    rollback.set_defaults(func=ops.cmd_rollback)

    fork = sub.add_parser("fork", parents=[api], help="fork a thread at a run, node or provider thread (L6)")
    fork.add_argument("thread")
    fork.add_argument("--run")
    fork.add_argument("--node")
    fork.add_argument("--provider-thread")
    fork.add_argument("--turn", help="a provider turn inside the source")
    fork.add_argument("--title")
    fork.add_argument("--refuse-if-active", action="store_true", help="refuse instead of forking the checkpoint")
    _key(fork)
    fork.set_defaults(func=ops.cmd_fork)
    lineage = sub.add_parser("lineage", parents=[api], help="a thread's lineage tree")
    lineage.add_argument("thread")
    lineage.set_defaults(func=ops.cmd_lineage)
    handoffs = _group(sub, "handoffs", "context handoffs (L5.5)")
    hl = handoffs.add_parser("list", parents=[api], help="a thread's handoffs")
    hl.add_argument("thread")
    _paged(hl)
    hl.set_defaults(func=ops.cmd_handoffs_list)
    hs = handoffs.add_parser("show", parents=[api], help="one handoff with its text")
    hs.add_argument("handoff")
    hs.set_defaults(func=ops.cmd_handoffs_show)


def add_policy_api_parsers(
    policy: argparse._SubParsersAction[argparse.ArgumentParser], api: argparse.ArgumentParser
) -> None:
    """``policy get|put``: the tenant's own policy through the API, for its admins (``set``/``show`` are the
    operator's, straight in NATS)."""
    pg = policy.add_parser("get", parents=[api], help="your tenant's policy, through the API (admin)")
    pg.set_defaults(func=ops.cmd_policy_get)
    pp = policy.add_parser("put", parents=[api], help="replace your tenant's policy, through the API (admin)")
    add_policy_fields(pp)
    pp.set_defaults(func=ops.cmd_policy_put)
