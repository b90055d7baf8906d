"""This process's place in the layout of `accelerate launch` (or of one process alone), for the commands that split work
across processes: the corpus commands and the faithfulness evaluation."""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # accelerate pulls in torch: imported when a command runs, not for --help
    from accelerate import PartialState


def process_state() -> "PartialState":
    """This process's place in the launch: its rank, its device, whether it is the main process.

    `PartialState` rather than `Accelerator`: the layout without the training machinery, whose settings (mixed
    precision, ...) could clash with another `Accelerator` in the process. It reads `ACCELERATE_USE_CPU` only when
    told to, as `Accelerator` does: without it, two CPU processes (gloo) would each run alone on every row.
    """
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    return PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
