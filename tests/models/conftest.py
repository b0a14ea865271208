"""The model tests' own fixture; the tiny configuration and batch they share with the shapes
package's tests are tests/conftest.py's."""

import pytest

from vitbert.models import VitBert


@pytest.fixture
def model(tiny_config):
    return VitBert(tiny_config()).eval()
