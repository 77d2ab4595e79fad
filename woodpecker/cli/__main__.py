"""`python -m woodpecker.cli`."""

import sys

from woodpecker.cli import main

sys.exit(main())
