"""The rules of a training run's output folder: which checkpoints are complete, which verify, which one `--resume`
continues from, whether the run finished, and what `--overwrite` may delete.

    OUTPUT/checkpoints/checkpoint_<step>/   what `Accelerator.save_state` wrote after optimizer step <step>
    OUTPUT/checkpoints/checkpoint_<step>/complete   written last: the SHA-256 of every other file of the checkpoint
    OUTPUT/checkpoints/finished             the run saved its model and card: nothing is left to resume
    OUTPUT/train.lock                       held (`fcntl.flock`) by the run writing the folder, with its process id

A checkpoint without `complete` was cut short (a kill during the save); one whose files no longer match their
checksums is damaged. Neither is ever loaded: Accelerate's random states are pickles, which can run code when
loaded, so a checkpoint folder is trusted input, and only checkpoints that verify are read.
"""

import fcntl
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from fnmatch import fnmatch
from pathlib import Path

from labelattn.coding import CODING_FILE, COVERAGE_PNG, RELIABILITY_PNG  # torch-free: the CLI imports this

CHECKPOINTS = "checkpoints"
LOCK = "train.lock"
COMPLETE = "complete"
FINISHED = "finished"
# What `labelattn average` writes beside the model: the runs averaged, with their scores and the average's.
AVERAGED_FILE = "averaged.json"
KEEP = 2  # complete checkpoints kept: the newest, and one to fall back to if it is damaged
# What a model folder's own output may be named: the weights, config, code, tokenizer and card that `save_pretrained`,
# a tokenizer, `labelattn train` and `labelattn average` write (with the coding report). `--overwrite` deletes these
# and refuses to touch anything else.
MODEL_FOLDER_FILES = (
    AVERAGED_FILE,
    CODING_FILE,
    RELIABILITY_PNG,
    COVERAGE_PNG,
    "config.json",
    "generation_config.json",
    "model*.safetensors",
    "model.safetensors.index.json",
    "pytorch_model*.bin",
    "pytorch_model.bin.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "*.model",
    "chat_template.jinja",
    "README.md",
    "training_args.json",
    "configuration_*.py",
    "modeling_*.py",
)


class CheckpointError(ValueError):
    """An output folder whose checkpoints cannot be resumed, or that `--overwrite` must not empty."""


# ------------------------------------------------------------------------------------------------ naming


def checkpoint_dir(output_dir: Path, step: int) -> Path:
    return Path(output_dir) / CHECKPOINTS / f"checkpoint_{step}"


def step_of(checkpoint: Path) -> int:
    return int(checkpoint.name.rsplit("_", 1)[1])


def all_checkpoints(output_dir: Path) -> list[Path]:
    """Every checkpoint folder, complete or not, oldest first."""
    folder = Path(output_dir) / CHECKPOINTS
    found = [p for p in folder.glob("checkpoint_*") if p.is_dir() and p.name.rsplit("_", 1)[1].isdigit()]
    return sorted(found, key=step_of)


# ------------------------------------------------------------------------------------------------ complete, verified


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _files(checkpoint: Path) -> list[Path]:
    return sorted(p for p in checkpoint.rglob("*") if p.is_file() and p.name != COMPLETE)


def mark_complete(checkpoint: Path) -> None:
    """Record the checksum of every file of `checkpoint` (all processes have written theirs), atomically: a kill
    leaves either no mark or a whole one."""
    manifest = {str(p.relative_to(checkpoint)): _sha256(p) for p in _files(checkpoint)}
    partial = checkpoint / f"{COMPLETE}.partial"
    partial.write_text(json.dumps({"sha256": manifest}, indent=1) + "\n")
    os.replace(partial, checkpoint / COMPLETE)


def is_complete(checkpoint: Path) -> bool:
    return (checkpoint / COMPLETE).is_file()


def damage(checkpoint: Path) -> str | None:
    """Why `checkpoint` must not be loaded (cut short, or a file that does not match its checksum); None if it
    verifies."""
    if not is_complete(checkpoint):
        return "it was cut short (no completion mark)"
    try:
        manifest = json.loads((checkpoint / COMPLETE).read_text())["sha256"]
        if not isinstance(manifest, dict) or not manifest:
            raise TypeError
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return f"its checksum list {COMPLETE!r} is unreadable"
    for name, expected in manifest.items():
        path = checkpoint / name
        if not path.is_file():
            return f"{name} is missing"
        if _sha256(path) != expected:
            return f"{name} does not match its checksum"
    return None


def complete_checkpoints(output_dir: Path) -> list[Path]:
    """Checkpoints marked complete (not yet verified), oldest first."""
    return [p for p in all_checkpoints(output_dir) if is_complete(p)]


def resumable_checkpoint(output_dir: Path, warn: Callable[[str], None]) -> Path:
    """The newest checkpoint that verifies; `warn` names every newer complete one that is damaged."""
    damaged = []
    for checkpoint in reversed(complete_checkpoints(output_dir)):
        reason = damage(checkpoint)
        if reason is None:
            for name, why in damaged:
                warn(f"warning: {name} is damaged ({why}): resuming from {checkpoint.name} instead.")
            return checkpoint
        damaged.append((checkpoint, reason))
    if damaged:
        listed = "; ".join(f"{path.name}: {why}" for path, why in damaged)
        raise CheckpointError(
            f"--resume: no checkpoint in {Path(output_dir) / CHECKPOINTS} verifies ({listed}); "
            "train again with --overwrite."
        )
    raise CheckpointError(
        f"--resume: {Path(output_dir) / CHECKPOINTS} holds no complete checkpoint; train without --resume first."
    )


def discard_after(output_dir: Path, step: int) -> None:
    """Delete the checkpoints newer than `step` (cut short or damaged): the resumed run writes them again."""
    for checkpoint in all_checkpoints(output_dir):
        if step_of(checkpoint) > step:
            shutil.rmtree(checkpoint)


def prune(output_dir: Path, keep: int = KEEP) -> None:
    """Keep the `keep` newest complete checkpoints; delete older ones, and older incomplete ones."""
    complete = complete_checkpoints(output_dir)
    if len(complete) <= keep:
        return
    oldest_kept = step_of(complete[-keep])
    for checkpoint in all_checkpoints(output_dir):
        if step_of(checkpoint) < oldest_kept:
            shutil.rmtree(checkpoint)


# ------------------------------------------------------------------------------------------------ the run


def mark_finished(output_dir: Path) -> None:
    (Path(output_dir) / CHECKPOINTS / FINISHED).touch()


def unfinished_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run that did not finish (work that a restart would throw away)."""
    if (Path(output_dir) / CHECKPOINTS / FINISHED).is_file():
        return None
    complete = complete_checkpoints(output_dir)
    return complete[-1] if complete else None


def start(output_dir: Path) -> None:
    """An empty checkpoint folder for a new run."""
    shutil.rmtree(Path(output_dir) / CHECKPOINTS, ignore_errors=True)
    (Path(output_dir) / CHECKPOINTS).mkdir(parents=True)


# ------------------------------------------------------------------------------------------------ one run at a time


@contextmanager
def locked(output_dir: Path) -> Iterator[None]:
    """Hold `output_dir` for this run: an exclusive `flock` on its `train.lock` (made with the folder if need be),
    which records this process's id. A second run, `--resume` or not, is refused at once, naming the holder. The
    kernel drops the lock of a killed run, so a stale file never blocks; the file goes when the run ends."""
    folder = Path(output_dir)
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    while True:
        handle = path.open("a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise CheckpointError(
                f"{output_dir} is in use by another labelattn train run (process {holder}, which holds {path}): wait "
                "for it to end, or train into another --output-dir."
            ) from None
        # The holder may have ended and removed the file between our open and our lock: lock the file now there.
        if path.exists() and os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
            break
        handle.close()
    handle.truncate(0)
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        handle.close()
        if made and not any(folder.iterdir()):
            folder.rmdir()  # a run refused before it wrote anything leaves no folder behind


# ------------------------------------------------------------------------------------------------ --overwrite


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or path.is_relative_to(folder)


def overwritable(output_dir: Path, inputs: dict[str, Path]) -> list[Path]:
    """What `--overwrite` deletes in `output_dir`: its entries, all of them a model folder's own output. Refuses a
    folder that holds (or is held by) a file the run reads (`inputs`: option -> path), the working directory or the
    home folder, or anything else."""
    folder = Path(output_dir).resolve()
    for option, given in inputs.items():
        path = Path(given).resolve()
        if _inside(path, folder) or _inside(folder, path):
            raise CheckpointError(
                f"--overwrite would delete {given}, which this run reads ({option}): keep it outside --output-dir "
                "or choose another --output-dir."
            )
    for place in (Path.cwd(), Path.home()):
        if _inside(place.resolve(), folder):
            raise CheckpointError(
                f"--overwrite would delete {output_dir}, which holds the working directory or the home folder: "
                "give the model a folder of its own."
            )
    if not folder.is_dir():
        return []
    entries = sorted(p for p in folder.iterdir() if p.name != LOCK)  # this run's own lock stays
    for entry in entries:
        own = entry.name == CHECKPOINTS if entry.is_dir() else any(fnmatch(entry.name, p) for p in MODEL_FOLDER_FILES)
        if not own or entry.is_symlink():
            raise CheckpointError(
                f"--overwrite would delete {entry}, which is not the output of a model folder: move it out of "
                f"{output_dir} or choose another --output-dir."
            )
    return entries


def delete(entries: Iterable[Path]) -> None:
    """Delete what `overwritable` returned."""
    for entry in entries:
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink(missing_ok=True)
