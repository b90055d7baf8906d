"""`python -m labelattn ...`: the same as the `labelattn` command, and what `accelerate launch -m labelattn ...`
starts in each process."""

import sys

from labelattn.cli import main

sys.exit(main())
