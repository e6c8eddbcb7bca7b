"""``python -m geokanon`` runs the command line."""

import sys

from geokanon.cli import main

sys.exit(main())
