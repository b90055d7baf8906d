"""The named points of a training run, and the callbacks that watch them.

The training loop calls `RunEvents(name, **fields)` at each of its named points: `batch` (before each batch,
with its epoch, step and row ids), `save_state` (a checkpoint's folder made, nothing written yet),
`checkpoint_written`, `checkpoint_complete`, `evaluate` (before a validation), `resumed`, and, while the model
folder is saved, `save_pretrained`, `tokenizer`, `card` and `finish`. Each callback is called as
`on_event(name, **fields)`: the shape a tracker (Accelerate's, a progress reporter) could also take.

The one callback shipped is `RunLog`, registered only when RUN_LOG_ENV or PAUSE_ENV is set, for the fault-injection
tests and for debugging: each process appends one JSON line per event to the file named by RUN_LOG_ENV (with
`.rank<N>` appended), and stops for good at the event named by PAUSE_ENV ("EVENT" or "EVENT@N", its N-th
occurrence; logged as `paused`), where a test kills it.
"""

import json
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

RUN_LOG_ENV = "LABELATTN_RUN_LOG"
PAUSE_ENV = "LABELATTN_PAUSE_AT"

Callback = Callable[..., None]  # on_event(name: str, **fields)


@dataclass
class RunLog:
    """One process's events as JSON lines in `path` (if given), pausing for good at the event `pause_at`."""

    path: str | None = None
    pause_at: str | None = None
    counts: Counter = field(default_factory=Counter)

    def __call__(self, name: str, **fields) -> None:
        self.counts[name] += 1
        if self.path:
            with open(self.path, "a") as log:
                log.write(json.dumps({"event": name, **fields}) + "\n")
        if self.pause_at in (name, f"{name}@{self.counts[name]}"):
            self("paused", at=self.pause_at)
            while True:  # until the test kills the process
                time.sleep(60)


@dataclass
class RunEvents:
    """The callbacks called at every named point of a run, in order."""

    callbacks: list[Callback] = field(default_factory=list)

    def __call__(self, name: str, **fields) -> None:
        for on_event in self.callbacks:
            on_event(name, **fields)

    @classmethod
    def from_env(cls, rank: int) -> "RunEvents":
        """The events of process `rank`, with a `RunLog` when the environment asks for one."""
        path, pause_at = os.environ.get(RUN_LOG_ENV), os.environ.get(PAUSE_ENV)
        if not (path or pause_at):
            return cls()
        return cls([RunLog(f"{path}.rank{rank}" if path else None, pause_at)])
