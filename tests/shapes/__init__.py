"""The shapes package's tests (vitbert.shapes). A package, so that its modules are imported as
``shapes.test_data`` and so on: the suite keeps no ``__init__.py`` elsewhere, and pytest's default
("prepend") import mode then needs every test file's basename to be unique, which
``test_data.py`` (also in tests/experiments) is not."""
