"""The model tests' own fixture; the tiny configuration and batch they share with the shapes
package's tests are tests/conftest.py's."""

import dataclasses

import pytest

from vitbert.models import VitBert


@pytest.fixture(params=["pre-norm", "bert"])
def model(request, tiny_config):
    """The tiny model in each text layout: every invariant of the joint model holds for both."""
    config = tiny_config()
    config.text = dataclasses.replace(config.text, layout=request.param)
    return VitBert(config).eval()
