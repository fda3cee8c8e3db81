"""``python -m envengineer.cli`` (also what ``accelerate launch -m envengineer.cli`` runs)."""

import sys

from envengineer.cli import main

sys.exit(main())
