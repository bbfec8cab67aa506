"""``python -m tfdiag.sample_jobs JOB ...``: the same as ``tfdiag sample JOB ...``."""

import sys

from tfdiag.sample_jobs.cli import main

sys.exit(main())
