"""Pretraining the image tower on generated images: no photo, no download, no licence.

* :mod:`.fractals`: FractalDB-style classes (random iterated function systems) and their
  renderings, pure functions of integer seeds.
* :mod:`.datamodule`: the classes as a Lightning data module (rendered once into a file, or on
  the fly for large images).
* :mod:`.module`: the caption model's own image tower + a linear classifier; at the end of
  ``fit`` the tower is written where ``model.net.image.pretrained`` reads it.
* :mod:`.cli`: ``scripts/pretrain_tower.py`` (``make tower``).

Off the caption model's path: nothing in the core imports this package.
"""
