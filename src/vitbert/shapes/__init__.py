"""The shapes data: generated pictures of two shapes whose hidden words can only be guessed by
looking, the embedded default's data, and what exists for it alone, apart from the core.

* :class:`ShapesSource` (:mod:`.source`): the generated data (:mod:`.data`) — a data source.
* :mod:`.captions`: does a caption name both objects' colours and shapes; the swapped captions
  the binding tests compare a caption with.
* :class:`BindingEvaluation` (:mod:`.binding`): the binding swap tests — an evaluation callback.
* :class:`BindingLevers` (:mod:`.model`): a tower that keeps hue apart from form, the neighbour
  lookup and its read sharing — a network extension (``model.net.extension``), which
  ``configs/shapes_binding.yaml`` names and older checkpoints of the embedded default hold.
* :mod:`.analysis`: which object a written caption gets wrong (``scripts/analyze.py --captions``).
"""

from vitbert.shapes.binding import BindingEvaluation
from vitbert.shapes.model import BindingLevers
from vitbert.shapes.source import ShapesSource

__all__ = ["BindingEvaluation", "BindingLevers", "ShapesSource"]
