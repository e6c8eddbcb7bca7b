"""A downstream project's guarantees on the release it publishes.

``test_release_is_safe`` passes on a release built with k=5; ``test_demands_k_8`` fails on
purpose (this project demands k=8), so the system test can check the message.
"""

from geokanon.testing import (
    assert_group_extents,
    assert_k_anonymous,
    assert_no_recoverable_hole,
    assert_release_verifies,
    assert_unit_caps,
)


def test_release_is_safe(geokanon_release, geokanon_source):
    assert_k_anonymous(geokanon_release, 5)
    assert_group_extents(geokanon_release, 300.0)
    assert_unit_caps(geokanon_release, 0.10)
    assert_no_recoverable_hole(geokanon_release.tables())
    assert_release_verifies(geokanon_release, geokanon_source)


def test_demands_k_8(geokanon_release):
    assert_k_anonymous(geokanon_release, 8)
