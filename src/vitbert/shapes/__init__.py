"""The shapes data and every lever that exists for it, apart from the core.

The embedded default trains on generated pictures of two shapes (:mod:`.data`), whose hidden
words can only be guessed by looking, and binds what it sees to the words it fills with levers
built for these pictures. None of them is switched on by a flag of the core: they plug in
through its general interfaces.

* :class:`ShapesSource` (:mod:`.source`): the generated data, its own caption scores and binding
  negatives (:mod:`.captions`), and twin photos (``twin_photos``) — a data source.
* :class:`BindingLevers` (:mod:`.model`): a tower that keeps hue apart from form, the neighbour
  lookup and its read sharing — a network extension (``model.net.extension``).
* :class:`TwinContrast` (:mod:`.twins`) and :class:`FocusedMaskedLM` (:mod:`.focus`): objectives
  in ``model.objectives``.
* :mod:`.analysis`: which object a written caption gets wrong (``scripts/analyze.py --captions``).

``configs/default.yaml`` names each; what each bought is measured in docs/binding.md.
"""

from vitbert.shapes.focus import FocusedMaskedLM
from vitbert.shapes.model import BindingLevers
from vitbert.shapes.source import ShapesSource
from vitbert.shapes.twins import TwinContrast

__all__ = ["BindingLevers", "FocusedMaskedLM", "ShapesSource", "TwinContrast"]
