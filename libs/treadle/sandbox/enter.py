"""Enter a sandbox: ``python3 -I -S enter.py LAUNCH.json [ARGS…]`` (stdlib only, run as root by the host).

LAUNCH.json (mode 0600, never inside any sandbox) holds ``argv`` (setpriv … bwrap … -- runtime), ``env``
(the whole environment inside), ``cgroups`` (``cgroup.procs`` files to join) and ``rlimits``
([name, soft, hard]) and ``inherit`` (names of variables taken from this process's own environment, for
what an SDK sets per spawn). This process joins the cgroups and sets the limits while it is still root, then
replaces itself with ``argv + ARGS`` under exactly ``env``: whatever environment its own spawner gave it
(claude-agent-sdk merges the host's) is dropped here. ARGS are the runtime's own arguments, appended
(the Claude Code CLI's, which the SDK passes to the wrapper script that calls this).
"""

import json
import os
import resource
import sys


def main(args):
    if not args:
        sys.stderr.write("enter.py: usage: enter.py LAUNCH.json [ARGS...]\n")
        return 125
    with open(args[0]) as f:
        launch = json.load(f)
    for procs in launch.get("cgroups", []):
        try:
            with open(procs, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            sys.stderr.write(f"enter.py: cannot join cgroup {procs}: {exc}\n")
            return 125
    for name, soft, hard in launch.get("rlimits", []):
        resource.setrlimit(getattr(resource, name), (soft, hard))
    argv = [*launch["argv"], *args[1:]]
    env = dict(launch["env"])
    for name in launch.get("inherit", []):  # named variables the spawner sets per process (never TREADLE_*)
        if name in os.environ and not name.startswith("TREADLE_"):
            env[name] = os.environ[name]
    try:
        os.execve(argv[0], argv, env)
    except OSError as exc:
        sys.stderr.write(f"enter.py: cannot run {argv[0]}: {exc}\n")
        return 126


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
