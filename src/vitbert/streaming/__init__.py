"""Captioned photos past one disk: litdata shards, written once, streamed to many nodes.

A package of its own, beside the core, as the shapes data is: it plugs into the core's data module
through the `vitbert.data.sources.DataSource` interface (its datasets, its training loader, the
tokenizer written with the shards), and needs litdata, which nothing else imports.

* :func:`write_shards` (:mod:`.shards`): any layout the core reads (or img2dataset's tar folders)
  into chunks of raw JPEG bytes and captions, a WordPiece trained on the training captions beside
  them (``scripts/prepare_data.py shards``).
* :class:`StreamingSource` (:mod:`.source`): those shards, local or ``s3://``, dealt to DDP ranks
  and loader workers, resumable mid-epoch (``configs/web.yaml``; docs/scale-out.md).
"""

from vitbert.streaming.shards import write_shards
from vitbert.streaming.source import StreamingSource

__all__ = ["StreamingSource", "write_shards"]
