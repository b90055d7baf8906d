"""The output folder of a corpus run: `run.json` (the run's settings) and one Arrow file per shard.

A shard is written under a temporary name (named by process id) and renamed when complete, so that a shard file
that exists is whole; the settings decide whether a run may reuse a folder's shards. Nothing here computes: see
`labelattn.corpus.jobs`.
"""

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import datasets
import pyarrow as pa

SETTINGS_FILE = "run.json"
SHARD_SUFFIX = ".arrow"
INPUT_FILE = "input.arrow"


class CorpusError(ValueError):
    """A corpus run that cannot start: a missing column, an output folder holding other results, ..."""


def check_writable(path: Path) -> None:
    """Refuse a folder this process cannot write in: `path`, or where it does not exist yet, the nearest folder
    above it (where it would be made). Tried, not inferred from permission bits (which root, ACLs and read-only
    mounts make wrong), with a nameless temporary file that leaves nothing behind."""
    existing = Path(path).absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        made = "" if existing == Path(path).absolute() else f", so {path} cannot be made"
        raise CorpusError(f"{existing} is a file, not a folder{made}: choose another output.")
    try:
        with tempfile.TemporaryFile(dir=existing):
            pass
    except OSError as error:
        raise CorpusError(
            f"Cannot write in {existing} ({error.strerror or error}): choose an output in a folder you can write to."
        ) from None


class ShardFolder:
    """The output folder of a corpus run: `run.json` (the settings) and `00000.arrow`, `00001.arrow`, ..."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.num_shards = 0  # set by the run, from the input's rows and the shard size
        # Whether `check_settings` found settings here (then `prepare` may replace them, being equal or overwritten).
        self.had_settings = False

    @property
    def input_file(self) -> Path:
        """Where an iterable input is written, to be read in shards like a `datasets.Dataset`."""
        return self.path / INPUT_FILE

    @property
    def settings_file(self) -> Path:
        return self.path / SETTINGS_FILE

    def shard(self, index: int) -> Path:
        return self.path / f"{index:05d}{SHARD_SUFFIX}"

    def own_files(self) -> list[Path]:
        """The files a run writes here (what --overwrite may delete): the settings, shards, unfinished shards and
        the scratch copy of an iterable input."""
        if not self.path.is_dir():
            return []
        return sorted(
            p
            for p in self.path.iterdir()
            if p.is_file()
            and (
                p.name in (SETTINGS_FILE, INPUT_FILE)
                or p.name.startswith(f"{INPUT_FILE}.tmp-")
                or (p.name[:5].isdigit() and (p.name.endswith(SHARD_SUFFIX) or ".tmp-" in p.name))
            )
        )

    def check_usable(self, protected: list[Path]) -> None:
        """Refuse a folder that this process cannot write in, that holds files no corpus run wrote, or that would
        hold or replace a file the run reads (`protected`)."""
        for path in protected:
            path = Path(path).resolve()
            if path == self.path.resolve() or self.path.resolve() in path.parents:
                raise CorpusError(f"The output folder {self.path} holds the input {path}: choose another output.")
        if self.path.exists() and not self.path.is_dir():
            raise CorpusError(f"{self.path} is a file, not a folder: choose another output.")
        check_writable(self.path)
        if not self.path.exists():
            return
        foreign = sorted({p.name for p in self.path.iterdir()} - {p.name for p in self.own_files()})
        if foreign:
            raise CorpusError(
                f"{self.path} holds files that are not a corpus run's ({', '.join(foreign[:5])}): choose a new or "
                "empty folder; --overwrite never deletes them."
            )

    def check_settings(self, settings: dict[str, Any], overwrite: bool) -> None:
        """Refuse a folder holding the results of a run with other settings, unless `overwrite`. Reads only:
        every process calls it, so that all refuse together."""
        self.had_settings = self.settings_file.exists()
        if overwrite or not self.had_settings:
            return
        recorded = json.loads(self.settings_file.read_text(encoding="utf-8"))
        wanted = json.loads(json.dumps(settings))
        differences = [
            f"{key}: {recorded.get(key)!r} there, {wanted.get(key)!r} now"
            for key in sorted(set(recorded) | set(wanted))
            if recorded.get(key) != wanted.get(key)
        ]
        if differences:
            # Its shard count, so that a user sees what --overwrite would delete (nothing, for a run killed early).
            finished = sum(1 for p in self.path.glob(f"*{SHARD_SUFFIX}") if p.name[:5].isdigit())
            raise CorpusError(
                f"{self.path} holds the results of another run ({'; '.join(differences)}; {finished} shard(s) "
                "finished). Pass --overwrite (overwrite=True) to replace them, or choose another output."
            )

    def prepare(self, settings: dict[str, Any], overwrite: bool) -> None:
        """Main process only, after `check_settings`: empty the folder of its own files when overwriting, drop
        unfinished shards of a killed run, and record the settings."""
        self.path.mkdir(parents=True, exist_ok=True)
        for path in self.own_files():
            if (overwrite and path.name != INPUT_FILE) or ".tmp-" in path.name:
                path.unlink()
        text = json.dumps(settings, indent=1, ensure_ascii=False)
        if overwrite or self.had_settings:
            self.settings_file.write_text(text, encoding="utf-8")
            return
        try:
            # Created only if still absent: of two runs started side by side into one new folder, the second to
            # get here reads the first one's settings, and is refused unless they are its own.
            with self.settings_file.open("x", encoding="utf-8") as handle:
                handle.write(text)
        except FileExistsError:
            self.check_settings(settings, overwrite=False)

    def pending(self) -> list[int]:
        return [i for i in range(self.num_shards) if not self.shard(i).exists()]

    def finished(self) -> int:
        return sum(self.shard(i).exists() for i in range(self.num_shards))

    def write(self, index: int, table: pa.Table) -> None:
        """Write a shard under a temporary name, then rename it: a shard file that exists is complete."""
        # Named by process id: two processes never write one temporary file, even two runs started side by side.
        temporary = self.path / f"{index:05d}.tmp-{os.getpid()}"
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        os.replace(temporary, self.shard(index))

    def dataset(self) -> datasets.Dataset:
        """The shards in order, memory-mapped, as one `datasets.Dataset`."""
        missing = [i for i in range(self.num_shards) if not self.shard(i).exists()]
        if missing:
            raise CorpusError(
                f"{len(missing)} shard(s) of {self.path} are missing (first {missing[0]}) after every process "
                "finished: on several machines the output folder must be on a file system they all share."
            )
        return datasets.concatenate_datasets([self.read(i) for i in range(self.num_shards)])

    def read(self, index: int) -> datasets.Dataset:
        """Shard `index`, memory-mapped; a damaged file (not an Arrow stream, cut short) is named, to be deleted."""
        try:
            return datasets.Dataset.from_file(str(self.shard(index)))
        except (pa.ArrowException, OSError) as error:
            raise CorpusError(
                f"The shard {self.shard(index)} is damaged ({str(error).splitlines()[0][:120]}): delete it and run "
                "the same command again, which computes that shard again and keeps the others."
            ) from None
