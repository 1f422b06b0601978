"""The control side's timeline: submitted changes in sample-time order over the applied state.

Each change is a function from one :class:`BendingState` to the next. Its command is prepared
from the state just before it in sample-time order (the applied state, then every pending change
due earlier), never from live tensors. A change scheduled before changes already submitted
re-plans those: a later change whose plan is now different is replaced by a corrected command
at the same time (its values are absolute, so the correction wins even if the first one has
already applied). The pending state, what will play once every change has applied, is what the
next change builds on; the applied state is what plays now. The timeline takes any number of
changes (a score of any length): what a live client may schedule ahead is bounded before it gets
here (:mod:`bendserver.schedule`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

from ..errors import BendingError
from .bends import Bends, Plan
from .commands import Command, CommandQueue
from .state import BendingState

Change = Callable[[BendingState], BendingState]


@dataclass
class Entry:
    """One submitted change: when, what it does, and the command that applies it."""

    at: int  #: sample time
    seq: int
    change: Change = field(compare=False)
    what: str = field(compare=False)
    ramps: dict[tuple[int, str], int] = field(compare=False)
    after: BendingState | None = field(default=None, compare=False)
    plan: Plan | None = field(default=None, compare=False)
    command: Command | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple[int, int]:
        return (self.at, self.seq)


class Timeline:
    """Pending changes of one engine; used under the engine's control lock."""

    def __init__(self, base: BendingState, bends: Bends, commands: CommandQueue) -> None:
        self.base = base  #: the state of the changes applied so far
        self.bends = bends
        self.commands = commands
        self.entries: list[Entry] = []
        self.pending = base  #: the state once every submitted change has applied
        self._seq = itertools.count()

    def submit(
        self,
        change: Change,
        at: int,
        what: str,
        ramps: dict[tuple[int, str], int] | None = None,
    ) -> None:
        """Schedule ``change`` at sample ``at`` (the engine passes its current time for "the
        next block"). Raises a BendingError, changing nothing, when the change does not apply
        or would break a later one."""
        self._fold_applied()
        entry = Entry(int(at), next(self._seq), change, what, ramps or {})
        entries = list(self.entries)
        index = bisect.bisect(entries, entry.key, key=lambda e: e.key)
        entries.insert(index, entry)
        states = self._fold(entries, index, entry)
        self._replan(entries[index:], states)
        self.entries = entries
        self.pending = entries[-1].after
        self.prune()

    def _fold(
        self, entries: list[Entry], index: int, new: Entry
    ) -> list[tuple[BendingState, BendingState]]:
        """The states before and after each entry from ``index`` on (nothing is changed)."""
        state = entries[index - 1].after if index else self.base
        states = []
        for entry in entries[index:]:
            try:
                after = entry.change(state)
            except BendingError as error:
                if entry is new:
                    raise
                raise BendingError(
                    f"this change would break '{entry.what}' scheduled after it: {error}"
                ) from None
            states.append((state, after))
            state = after
        return states

    def _replan(
        self, entries: list[Entry], states: list[tuple[BendingState, BendingState]]
    ) -> None:
        """Submit the new entry's command and replace the commands whose plan changed (and,
        once one is replaced, every later one, so that their order is kept)."""
        replacing = False
        for entry, (before, after) in zip(entries, states, strict=True):
            plan = self.bends.plan(before, after, entry.ramps)
            if entry.command is None:
                payload = self.bends.payload(plan, after)
            elif plan != entry.plan:
                plan = plan.covering(entry.plan)
                payload = self.bends.payload(plan, after)
                replacing = True
            elif replacing:
                payload = entry.command.payload
            else:
                entry.after = after
                continue
            replaced = entry.command
            entry.after, entry.plan = after, plan
            entry.command = self.commands.submit(payload, entry.at, entry.what)
            if replaced is not None:  # after: a reader of `applied` never sees it swept as done
                self.commands.cancel(replaced)

    @property
    def applied(self) -> BendingState:
        """What plays now: the state of the changes applied so far (read without changing
        anything, so any thread may ask, even while another prepares a change)."""
        state = self.base
        for entry in list(self.entries):
            if not entry.command.done:
                break
            state = entry.after
        return state

    def prune(self) -> None:
        """Fold the applied changes into the base state, drop what the audio thread handed
        back, and forget the ops and graphs no state uses any more."""
        self.commands.drain_released()
        self._fold_applied()
        self.bends.keep_only([self.base, *(e.after for e in self.entries)])

    def _fold_applied(self) -> None:
        """Move the applied prefix of the timeline into the base state."""
        done = 0
        for entry in self.entries:
            if not entry.command.done:
                break
            self.base = entry.after
            done += 1
        del self.entries[:done]
