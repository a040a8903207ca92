"""`python -m looptrace` runs the command line."""

import sys

from looptrace._cli import main

sys.exit(main())
