"""Which completed runs a provider thread has not seen (L5.3), kept as the thread folds, so a run's start asks
it without walking every run (bench/run.py scenario F: the walk made each run's start cost the thread's length).

``Completed`` holds the thread's completed runs; ``evolve`` tells it about every event after folding it. Only
events without the trait ``other_runs`` change the status of a run, and only of the run the event names
(``run_id``); any other event (a rollback marks many runs) makes it count again at the next question.
``Coverage`` answers per provider thread: the completed ordinals its ``covered_ordinals`` lacks, kept from a
log of the ordinals whose completion changed. Both are caches: the plain computation over ``runs`` gives the same answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from treadle.core.run.model import Run


class Completed:
    """The ordinals of the completed runs of a list of runs (with how many runs have each), and a log of the
    ordinals whose count changed since ``generation`` began."""

    __slots__ = ("_runs", "_seen", "_done", "ordinals", "log", "generation", "dirty")

    def __init__(self) -> None:
        self._runs: list[Run] | None = None
        self._seen = 0
        self._done: dict[int, Run] = {}  # id(run) -> run, for each completed run
        self.ordinals: Counter[int] = Counter()
        self.log: list[int] = []
        self.generation = 0
        self.dirty = True

    def after(self, runs: list[Run], payload: Any, find: Callable[[str], Run | None]) -> None:
        """``payload`` was folded into the state whose runs are ``runs`` (``find``: a run by id)."""
        if payload.TRAITS.other_runs:
            self.dirty = True
        elif not self.dirty and runs is self._runs and (run_id := getattr(payload, "run_id", None)):
            if (run := find(run_id)) is not None:
                self._check(run)

    def _check(self, run: Run) -> None:
        done = run.status == "completed"
        if done == (id(run) in self._done):
            return
        if done:
            self._done[id(run)] = run
            self.ordinals[run.ordinal] += 1
        else:
            del self._done[id(run)]
            self.ordinals[run.ordinal] -= 1
            if not self.ordinals[run.ordinal]:
                del self.ordinals[run.ordinal]
        self.log.append(run.ordinal)

    def current(self, runs: list[Run]) -> Completed:
        """Up to date with ``runs``: counted again when an event it could not follow came, or the list is not the
        one it counted; else only the runs appended since."""
        if self.dirty or runs is not self._runs or len(runs) < self._seen:
            self._runs, self._seen, self._done, self.ordinals, self.log = runs, 0, {}, Counter(), []
            self.generation += 1
            self.dirty = False
        for i in range(self._seen, len(runs)):
            self._check(runs[i])
        self._seen = len(runs)
        return self


class Coverage:
    """For one provider thread: the completed ordinals not in its ``covered_ordinals`` (a list that only grows by
    appends, or is replaced)."""

    __slots__ = ("_covered", "_seen", "_set", "_generation", "_logged", "missing")

    def __init__(self) -> None:
        self._covered: list[int] | None = None
        self._seen = 0
        self._set: set[int] = set()
        self._generation = -1
        self._logged = 0
        self.missing: set[int] = set()

    def covered(self, items: list[int]) -> set[int]:
        """``items`` as a set; kept across calls while the list only grew."""
        if items is not self._covered or len(items) < self._seen:
            self._covered, self._seen, self._set = items, 0, set()
            self._generation = -1  # ``missing`` is counted again
        new = items[self._seen :]
        self._set.update(new)
        self.missing.difference_update(new)
        self._seen = len(items)
        return self._set

    def of(self, completed: Completed, items: list[int]) -> set[int]:
        covered = self.covered(items)
        if self._generation != completed.generation:
            self.missing = set(completed.ordinals) - covered
            self._generation, self._logged = completed.generation, len(completed.log)
        for o in completed.log[self._logged :]:
            if o in completed.ordinals and o not in covered:
                self.missing.add(o)
            else:
                self.missing.discard(o)
        self._logged = len(completed.log)
        return self.missing
