"""``python -m geokanon`` runs the command line."""

import sys

from geokanon.cli import run

sys.exit(run())
