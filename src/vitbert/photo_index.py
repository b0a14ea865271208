"""The contrastive embeddings of a folder of photos, computed once and kept beside the photos.

Searching a folder for a sentence needs every photo's embedding (``VitBert.embed_images``); the
image tower is by far the costliest part of a search, so a folder's embeddings are saved as one
safetensors file and the next search reads them back instead of running the tower again:

    <folder>/.vitbert-index-<model>.safetensors     (or any path given as ``index_path``)
        tensor "embeddings": float32 (P, E), one unit row per readable photo, in name order
        metadata "vitbert_index": JSON {"version", "model", "photos": [{"name", "size",
                                  "mtime_ns"}], "skipped": [{"name", "size", "mtime_ns",
                                  "reason"}]}

``model`` is :func:`model_identity`: a hash of exactly the weights and settings an image
embedding depends on, so another model (or the same one trained further) never reads this one's
vectors. A photo is reused only when its name, size and modification time all match the record;
a new or changed photo is embedded, a removed one dropped, and the file rewritten. Broken photos
are recorded with the reason, so they are named on every search without being read again.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from vitbert.data.cache import BadImageError, read_photo, resize_center_crop
from vitbert.data.files import atomic_write
from vitbert.predict import PredictError, load_image

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
INDEX_VERSION = 1
METADATA_KEY = "vitbert_index"
PROGRESS_FROM = 64  # photos: a build shorter than this draws no progress bar
EmbedImages = Callable[[Tensor], Tensor]  # uint8 (B, 3, S, S) → unit vectors (B, E)


class FolderError(PredictError):
    """A folder that cannot be searched (missing, or without a single photo)."""


@dataclass
class PhotoIndex:
    """The embeddings of a set of photos, and where each came from.

    ``names``: a file name in ``folder`` per row (or a label for photos given in memory);
    ``embeddings`` (P, E) float32 unit rows; ``skipped``: (name, reason) of each photo that could
    not be read; ``embedded`` / ``reused``: photos run through the tower by this build, and read
    back from ``path``; ``images``: uint8 (P, 3, S, S) for photos given in memory (None for a
    folder, whose photos are read again from disk when a re-ranking needs their pixels).
    """

    names: list[str]
    embeddings: Tensor
    folder: Path | None = None
    path: Path | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    embedded: int = 0
    reused: int = 0
    images: Tensor | None = None

    def __len__(self) -> int:
        return len(self.names)

    def pixels(self, rows: Sequence[int], size: int) -> Tensor:
        """uint8 (len(rows), 3, size, size): the photos of ``rows``, as the model reads them."""
        if self.images is not None:
            return self.images[list(rows)]
        return torch.stack([load_image(self.folder / self.names[r], size) for r in rows])

    def describe(self) -> dict:
        """The ``index`` record of a search result (docs/retrieval.md)."""
        return {"path": str(self.path) if self.path else None, "photos": len(self.names),
                "embedded": self.embedded, "reused": self.reused}


def model_identity(model) -> str:
    """A short hash of what an image embedding depends on: the image tower's and the image
    projection's weights, and the settings that shape the tower's output (image size, pooled or
    patch tokens, the contrastive width). Same weights, same vectors; anything else, another
    index."""
    digest = hashlib.sha256()
    settings = {"image": model.config.image.__dict__, "image_tokens": model.config.image_tokens,
                "itc_dim": model.config.itc_dim}
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for name, tensor in sorted(model.state_dict().items()):
        if name.startswith(("image_tower.", "itc.image_proj.")):
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def default_index_path(folder: Path, identity: str) -> Path:
    return folder / f".vitbert-index-{identity}.safetensors"


def photo_files(folder: str | Path) -> list[Path]:
    """The photos of ``folder`` by name (hidden files, sub-folders and other suffixes left out);
    raises :class:`FolderError` for a missing folder or one without a photo."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FolderError(f"{folder}: no such folder; pass a folder of photos")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                   and p.suffix.lower() in PHOTO_SUFFIXES)
    if not files:
        raise FolderError(f"{folder}: no photos in it (looked for {', '.join(PHOTO_SUFFIXES)})")
    return files


def _record(path: Path) -> dict:
    stat = path.stat()
    return {"name": path.name, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _same_file(a: dict, b: dict) -> bool:
    return all(a[key] == b[key] for key in ("name", "size", "mtime_ns"))


def read_index(path: Path, identity: str) -> tuple[dict[str, Tensor], dict[str, dict]]:
    """What a saved index holds for this model: name → (record + embedding row) of the photos
    and name → record of the skipped files; nothing for a missing, unreadable or foreign file."""
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    try:
        with safe_open(str(path), "pt") as stored:
            meta = json.loads(stored.metadata()[METADATA_KEY])
            if meta.get("version") != INDEX_VERSION or meta.get("model") != identity:
                return {}, {}
            rows = stored.get_tensor("embeddings")
    except (OSError, SafetensorError, KeyError, TypeError, ValueError):
        return {}, {}
    photos = {record["name"]: {**record, "row": rows[i]}
              for i, record in enumerate(meta["photos"])}
    return photos, {record["name"]: record for record in meta["skipped"]}


def write_index(path: Path, identity: str, records: list[dict], embeddings: Tensor,
                skipped: list[dict]) -> bool:
    """Save the index atomically; False (and a line on stderr) when the place is not writable:
    the search still answers, it will just embed the folder again next time."""
    from safetensors.torch import save

    meta = {"version": INDEX_VERSION, "model": identity, "photos": records, "skipped": skipped}
    data = save({"embeddings": embeddings.contiguous()},
                metadata={METADATA_KEY: json.dumps(meta)})
    try:
        atomic_write(path, data)
    except OSError as error:
        print(f"warning: cannot save the photo index {path} ({error}); the next search embeds "
              "the photos again (pass a writable index path)", file=sys.stderr)
        return False
    return True


def build_index(folder: str | Path, embed: EmbedImages, identity: str, size: int,
                index_path: str | Path | None = None, batch_size: int = 32,
                progress: bool | None = None) -> PhotoIndex:
    """The index of ``folder``'s photos, reusing what the saved index holds for unchanged files.

    ``embed`` runs the tower on uint8 (B, 3, size, size) batches; only new or changed photos
    reach it. ``progress``: a bar on stderr (None: when at least :data:`PROGRESS_FROM` photos
    need embedding).
    """
    folder = Path(folder)
    files = photo_files(folder)
    path = Path(index_path) if index_path is not None else default_index_path(folder, identity)
    saved, saved_skips = read_index(path, identity) if path.is_file() else ({}, {})
    records = [_record(file) for file in files]
    rows: dict[str, Tensor] = {}
    skipped: list[dict] = []
    todo: list[dict] = []
    for record in records:
        name = record["name"]
        if name in saved and _same_file(saved[name], record):
            rows[name] = saved[name]["row"]
        elif name in saved_skips and _same_file(saved_skips[name], record):
            skipped.append(saved_skips[name])  # still the same broken file: not read again
        else:
            todo.append(record)
    reused = len(rows)
    new_skips = _embed_files(folder, todo, embed, size, batch_size, rows, progress)
    skipped = sorted(skipped + new_skips, key=lambda r: r["name"])
    kept = [record for record in records if record["name"] in rows]
    if not kept:
        raise FolderError(f"{folder}: none of its {len(records)} photos could be read "
                          f"({skipped[0]['name']}: {skipped[0]['reason']})")
    embeddings = torch.stack([rows[record["name"]] for record in kept]).float()  # (P, E)
    gone = set(saved) - set(rows) or set(saved_skips) - {s["name"] for s in skipped}  # removed
    if todo or gone or not path.is_file():
        write_index(path, identity, kept, embeddings, skipped)
    return PhotoIndex([r["name"] for r in kept], embeddings, folder, path,
                      [(s["name"], s["reason"]) for s in skipped], len(todo) - len(new_skips),
                      reused)


def _embed_files(folder: Path, todo: list[dict], embed: EmbedImages, size: int,
                 batch_size: int, rows: dict[str, Tensor], progress: bool | None) -> list[dict]:
    """Embed the photos of ``todo`` into ``rows`` (name → (E,)); returns the skipped records,
    each with its reason (read by :func:`vitbert.predict.read_photo`, as every user photo)."""
    from tqdm.auto import tqdm

    show = len(todo) >= PROGRESS_FROM if progress is None else progress
    bar = tqdm(total=len(todo), desc=f"indexing {folder.name}", unit="photo", disable=not show,
               file=sys.stderr)
    skipped: list[dict] = []
    for start in range(0, len(todo), batch_size):
        batch, names = [], []
        for record in todo[start:start + batch_size]:
            try:
                photo = read_photo(folder / record["name"], at_least=size)
            except BadImageError as error:
                skipped.append({**record, "reason": str(error)})
                continue
            batch.append(torch.from_numpy(resize_center_crop(photo, size)))  # (3, S, S)
            names.append(record["name"])
        if batch:
            vectors = embed(torch.stack(batch)).float().cpu()  # (b, E)
            rows.update(zip(names, vectors, strict=True))
        bar.update(len(todo[start:start + batch_size]))
    bar.close()
    return skipped


__all__ = ["PHOTO_SUFFIXES", "FolderError", "PhotoIndex", "build_index", "default_index_path",
           "model_identity", "photo_files", "read_index", "write_index"]
