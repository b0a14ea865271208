"""The course experiments, rebuilt on the project's own encoder, attention and positions.

Entry points live in ``scripts/experiments/`` (``position.py``, ``heads.py``, ``scale.py``); this
package holds what they share: the 40×40 shape pictures (:mod:`.data`), the small models
(:mod:`.models`), a plain CPU training loop (:mod:`.train`), the √d measurement and toy model
(:mod:`.scaling`), and the table / JSON / plot helpers (:mod:`.report`).
"""
