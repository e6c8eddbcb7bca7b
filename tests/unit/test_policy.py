import math

import pytest

from geokanon import InputError, OutlierPolicy
from geokanon.policy import TimeMode


def test_defaults_follow_the_note():
    p = OutlierPolicy(k=5, r_max_m=2000.0)
    assert (p.merge_ratio, p.generalise_ratio, p.tau, p.unit_cap) == (2.0, 4.0, 0.01, 0.10)
    assert p.disposal_warning_share == 0.05
    assert p.search_radius_m == 8000.0


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"k": 1}, "k"),
        ({"k": True}, "k"),
        ({"k": 5.0}, "k"),
        ({"r_max_m": 0.0}, "r_max_m"),
        ({"r_max_m": -3.0}, "r_max_m"),
        ({"r_max_m": math.inf}, "r_max_m"),
        ({"r_max_m": math.nan}, "r_max_m"),
        ({"merge_ratio": 4.0}, "merge_ratio"),
        ({"merge_ratio": 1.0}, "merge_ratio"),
        ({"tau": 0.0}, "tau"),
        ({"tau": 1.0}, "tau"),
        ({"unit_cap": 1.5}, "unit_cap"),
        ({"t_max_s": -1.0}, "t_max_s"),
        ({"time_mode": "weekly"}, "time_mode"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_values_name_the_parameter(changes, name):
    values = {"k": 5, "r_max_m": 100.0, **changes}
    with pytest.raises(InputError, match=name):
        OutlierPolicy(**values)


def test_keyword_only_and_frozen():
    with pytest.raises(TypeError):
        OutlierPolicy(5, 100.0)  # type: ignore[misc]
    p = OutlierPolicy(k=5, r_max_m=100.0)
    with pytest.raises(AttributeError):
        p.k = 3  # type: ignore[misc]


def test_unit_cap_one_allowed_and_replace_validates():
    p = OutlierPolicy(k=5, r_max_m=100.0, unit_cap=1.0, time_mode="time_of_day")
    assert p.time_mode is TimeMode.TIME_OF_DAY
    with pytest.raises(InputError):
        p.replace(k=0)
    assert p.replace(k=4).k == 4
