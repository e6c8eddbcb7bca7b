"""geokanon: spatially k-anonymous releases that deal honestly with outliers.

Map of the modules (imports flow downwards only):

- :mod:`geokanon.errors` - exception and warning hierarchy
- :mod:`geokanon.policy` - frozen options (:class:`OutlierPolicy`) and label enums
- :mod:`geokanon.io` - reading records into a :class:`~geokanon.io.PointTable`
- :mod:`geokanon.neighbours` - exact distinct-subject neighbour distances (space, time)
- :mod:`geokanon.classify` - isolation ratios, labels, per-unit table, cap verdicts
- :mod:`geokanon.pipeline` - running the stages on one machine
- :mod:`geokanon.demo` - the bundled synthetic example
- :mod:`geokanon.cli` - the command line (nothing imports it); it renders progress with
  ``geokanon._display`` (``rich``), which the library reports through ``geokanon._progress``
"""

from geokanon.errors import (
    GeokanonError,
    InputError,
    ParameterWarning,
    PrivacyRiskWarning,
    ReleaseRefused,
    Unsatisfiable,
    VerificationFailed,
)
from geokanon.policy import Disposal, Label, OutlierPolicy, TimeMode

__version__ = "0.1.0"

__all__ = [
    "Disposal",
    "GeokanonError",
    "InputError",
    "Label",
    "OutlierPolicy",
    "ParameterWarning",
    "PrivacyRiskWarning",
    "ReleaseRefused",
    "TimeMode",
    "Unsatisfiable",
    "VerificationFailed",
    "__version__",
]
