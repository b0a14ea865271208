"""The towers and the joint model, built on :mod:`vitbert.nn`."""
