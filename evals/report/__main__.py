"""``python -m evals.report [DIR]``."""

import sys

from evals.report.render import main

sys.exit(main())
