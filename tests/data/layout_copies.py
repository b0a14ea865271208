"""Small copies of the layouts people hold their captioned photos in, written file for file as the
real ones are (names, headers, folders, quirks), with a few tiny JPEGs each (`shard_photos.jpeg`).
Every copy also holds one bad row and one listed photo whose file is missing: both must be skipped,
counted and named.

Each writer returns a `Copy`: the folder, and what a reader must make of it (every photo's split
and captions, the bad row's and the missing photo's names as the warning gives them).
Imported by bare name (``from layout_copies import ...``): pytest puts this folder on sys.path.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image
from shard_photos import jpeg

from vitbert.data.layouts import hash_split
from vitbert.data.layouts.coco import val_half

WORDS = ["dog", "man", "girl", "ball", "grass", "beach", "water", "red", "bike", "running"]


@dataclass
class Copy:
    """A layout written to disk, and what reading it must give."""

    root: Path
    fmt: str
    photos: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # file: split, captions
    bad_row: str = ""  # how the warning names the bad row
    missing: list[str] = field(default_factory=list)  # listed photos without a file
    unlisted: list[str] = field(default_factory=list)  # photos the split leaves out

    def split_counts(self) -> dict[str, tuple[int, int]]:
        """(photos, captions) per split of the photos that must reach the cache."""
        out = {s: (0, 0) for s in ("train", "val", "test")}
        for split, caps in self.photos.values():
            photos, captions = out[split]
            out[split] = (photos + 1, captions + len(caps))
        return out


def captions(i: int, n: int = 5) -> list[str]:
    """Five captions of photo i, the way crowd workers write them (capital, spaces before '.')."""
    return [f"A {WORDS[(i + k) % 10]} and a {WORDS[(3 * i + k) % 10]} near the "
            f"{WORDS[(i + 2 * k) % 10]} ." for k in range(n)]


def write_photo(path: Path, i: int) -> None:
    """Photo i as a small JPEG (a PNG where the name says .png)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".png":
        Image.open(io.BytesIO(jpeg(i))).save(path)
    else:
        path.write_bytes(jpeg(i))


# ----------------------------------------------------------------------------- Flickr8k


def flickr8k_name(i: int) -> str:
    """A Flickr8k-style file name: Flickr's photo id, an underscore, its 10-hex secret."""
    return f"{1000268201 + 7919 * i}_{(2654435761 * i) % 16**10:010x}.jpg"


QUIRK = "2258277193_586949ec62.jpg"  # listed a second time, as "<name>.1", in the release


def flickr8k_release(root: Path, flat: bool = False) -> Copy:
    """Flickr8k as released: Flicker8k_Dataset/ (sic) and Flickr8k_text/ with Flickr8k.token.txt,
    Flickr8k.lemma.token.txt and the three split files (``flat``: all in `root`, as the dev set
    lies). Ten photos in the split files (6 train, 2 dev, 2 test), one photo captioned but in no
    split file, one listed and captioned with no photo file, the release's `QUIRK` photo (train)
    with its second name `QUIRK.1` (captioned, no file, in no split file), and one token line
    without its tab."""
    text = root if flat else root / "Flickr8k_text"
    text.mkdir(parents=True, exist_ok=True)
    names = [flickr8k_name(i) for i in range(12)] + [QUIRK]
    split_of = {**{n: "train" for n in names[:6]}, names[6]: "val", names[7]: "val",
                names[8]: "test", names[9]: "test", names[11]: "train", QUIRK: "train"}
    copy = Copy(root, "flickr8k", missing=[names[11], f"{QUIRK}.1"], unlisted=[names[10]])
    lines = []
    for i, name in enumerate(names):
        caps = captions(i)
        lines += [f"{name}#{k}\t{c}" for k, c in enumerate(caps)]
        if name != names[11]:
            write_photo(root / "Flicker8k_Dataset" / name, i)
        if name in split_of and name != names[11]:
            copy.photos[name] = (split_of[name], caps)
        if name == QUIRK:
            lines += [f"{QUIRK}.1#{k}\t{c}" for k, c in enumerate(captions(99))]
    bad_line = 7
    lines.insert(bad_line - 1, f"{names[1]}#5 A dog with no tab before its caption .")
    copy.bad_row = f"Flickr8k.token.txt line {bad_line}"
    (text / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    lemma = [line.replace("dogs", "dog").lower() for line in lines]
    (text / "Flickr8k.lemma.token.txt").write_text("\n".join(lemma) + "\n")
    for split, file in (("train", "trainImages"), ("val", "devImages"), ("test", "testImages")):
        listed = [n for n in names if split_of.get(n) == split]
        (text / f"Flickr_8k.{file}.txt").write_text("\n".join(listed) + "\n")
    return copy


def flickr8k_kaggle(root: Path) -> Copy:
    """Kaggle's Flickr8k: Images/ and captions.txt, real CSV (``image,caption``; a caption with a
    comma or a quote is quoted, a quote doubled), no split. One row lost its caption, one listed
    photo has no file."""
    names = [flickr8k_name(i) for i in range(10)]
    copy = Copy(root, "kaggle8k", missing=[names[9]])
    rows = [["image", "caption"]]
    for i, name in enumerate(names):
        caps = captions(i)
        if i == 2:
            caps[1] = 'A man in a "Go Team" shirt , laughing , waves at the camera .'
        if i == 4:
            caps[3] = "A girl, a dog, and a ball on the grass ."
        rows += [[name, c] for c in caps]
        if name != names[9]:
            write_photo(root / "Images" / name, i)
            copy.photos[name] = (hash_split(name), caps)
    rows.insert(8, [names[1]])  # a row without its caption
    copy.bad_row = "captions.txt line 9"
    with open(root / "captions.txt", "w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    return copy


# ----------------------------------------------------------------------------- Karpathy's json


def karpathy_json(root: Path, dataset: str) -> Copy:
    """Karpathy's dataset_flickr8k.json (photos in Flicker8k_Dataset/) or dataset_coco.json
    (photos in train2014/ and val2014/, each entry's ``filepath``; restval is train). One entry's
    photo is missing; one sentence is empty (raw "" and no tokens): the bad row."""
    entries, copy = [], Copy(root, "karpathy")
    splits = ["train", "val", "test", "restval" if dataset == "coco" else "train"]
    for i in range(10):
        split = splits[i % 4]
        caps = captions(i)
        entry = {"sentids": list(range(5 * i, 5 * i + 5)), "imgid": i, "split": split,
                 "sentences": [{"tokens": c.lower().rstrip(" .").split(), "raw": c, "imgid": i,
                                "sentid": 5 * i + k} for k, c in enumerate(caps)]}
        if dataset == "coco":
            folder = "train2014" if split in ("train", "restval") else "val2014"
            name = f"COCO_{folder}_{391895 + 17 * i:012d}.jpg"
            entry.update(filepath=folder, filename=name, cocoid=391895 + 17 * i)
            file = f"{folder}/{name}"
        else:
            file = entry["filename"] = flickr8k_name(i)
            folder = "Flicker8k_Dataset"
        if i == 5:
            entry["sentences"][2] = {"tokens": [], "raw": "", "imgid": i, "sentid": 5 * i + 2}
            caps = caps[:2] + caps[3:]
            copy.bad_row = f"{file}: empty caption"
        if i == 7:
            copy.missing = [file]
        else:
            write_photo(root / (file if dataset == "coco" else f"{folder}/{file}"), i)
            copy.photos[file] = ("train" if split == "restval" else split, caps)
        entries.append(entry)
    (root / f"dataset_{dataset}.json").write_text(json.dumps({"images": entries,
                                                               "dataset": dataset}))
    return copy


# ----------------------------------------------------------------------------- COCO's own


def coco_annotations(root: Path, year: str = "2017") -> Copy:
    """COCO's annotations/captions_train<year>.json and captions_val<year>.json (info, licenses,
    images, annotations), photos in train<year>/ and val<year>/. Six train photos and eight val
    photos (halved into val and test by the hash); one val image has no file, one annotation
    names an image_id that images[] lacks (the bad row); captions as COCO's are: no space before
    the full stop, some with a trailing newline."""
    copy = Copy(root, "coco")
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    ann_id = 1
    for part, count in (("train", 6), ("val", 8)):
        folder = f"{part}{year}"
        images, annotations = [], []
        for j in range(count):
            i = j + (0 if part == "train" else 6)
            image_id = 9 + 1000 * i
            name = (f"{image_id:012d}.jpg" if year == "2017" else
                    f"COCO_{folder}_{image_id:012d}.jpg")
            images.append({"license": 3, "file_name": name,
                           "coco_url": f"http://images.cocodataset.org/{folder}/{name}",
                           "height": 30, "width": 40, "date_captured": "2013-11-14 11:18:45",
                           "flickr_url": "", "id": image_id})
            caps = [c.replace(" .", ".") + ("\n" if k == 1 else "")
                    for k, c in enumerate(captions(i))]
            for c in caps:
                annotations.append({"image_id": image_id, "id": ann_id, "caption": c})
                ann_id += 1
            file = f"{folder}/{name}"
            if part == "val" and j == 3:
                copy.missing = [file]
                continue
            write_photo(root / file, i)
            split = "train" if part == "train" else val_half(file)
            copy.photos[file] = (split, [c.strip() for c in caps])
        if part == "val":
            annotations.insert(4, {"image_id": 424242, "id": 99999, "caption": "A lost caption."})
            copy.bad_row = f"captions_{folder}.json annotations[4]"
        data = {"info": {"description": f"COCO {year} Dataset", "year": int(year)},
                "licenses": [{"url": "http://creativecommons.org/licenses/by-nc-sa/2.0/",
                              "id": 3, "name": "Attribution-NonCommercial-ShareAlike License"}],
                "images": images, "annotations": annotations}
        (root / "annotations" / f"captions_{folder}.json").write_text(json.dumps(data))
    return copy


# ----------------------------------------------------------------------------- imagefolder


def imagefolder(root: Path, kind: str) -> Copy:
    """A folder of one's own photos in the Hugging Face imagefolder convention.

    ``split-jsonl``: train/, validation/, test/, each with its metadata.jsonl (``file_name``,
    ``text``; two rows for some photos, photos in a subfolder of the split folder), one photo in
    an extra/ folder outside them (listed in the top metadata.jsonl: left out, counted), a line
    that is not JSON (the bad row), a row whose photo is missing.
    ``top-csv``: one metadata.csv at the top (``file_name,caption``; quoted commas), no split
    folders (the hash split), a row without its file_name (the bad row), a missing photo.
    """
    copy = Copy(root, "imagefolder")
    if kind == "split-jsonl":
        rows: dict[Path, list[str]] = {}
        for i in range(9):
            split, folder = [("train", "train"), ("val", "validation"), ("test", "test")][i % 3]
            name = f"holiday/IMG_{20240601 + i}.jpg" if i % 2 else f"IMG_{20240601 + i}.jpg"
            caps = captions(i, 2 if i % 4 == 0 else 1)
            rows.setdefault(root / folder, []).extend(
                json.dumps({"file_name": name, "text": c, "likes": i}) for c in caps)
            file = f"{folder}/{name}"
            if i == 4:
                copy.missing = [file]
                continue
            write_photo(root / file, i)
            copy.photos[file] = (split, caps)
        rows[root / "train"].insert(2, '{"file_name": "IMG_1.jpg", "text": "unterminated')
        copy.bad_row = "train/metadata.jsonl line 3"
        write_photo(root / "extra" / "IMG_9.jpg", 9)
        rows[root] = [json.dumps({"file_name": "extra/IMG_9.jpg", "text": captions(9)[0]})]
        copy.unlisted = ["extra/IMG_9.jpg"]
        for folder, lines in rows.items():
            (folder / "metadata.jsonl").write_text("\n".join(lines) + "\n")
        return copy
    if kind == "top-csv":
        with open(root / "metadata.csv", "w", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(["file_name", "caption"])
            for i in range(8):
                name = f"photo_{i:03d}.png" if i == 2 else f"photo_{i:03d}.jpg"
                caps = [c.replace(" near", ", near") for c in captions(i, 2)]
                writer.writerows([name, c] for c in caps)
                if i == 6:
                    copy.missing = [name]
                    continue
                write_photo(root / name, i)
                copy.photos[name] = (hash_split(name), caps)
            writer.writerow(["", "A caption whose photo is not named ."])
        copy.bad_row = "metadata.csv line 18"
        return copy
    raise ValueError(kind)


WRITERS = {
    "flickr8k": flickr8k_release,
    "flickr8k-flat": lambda root: flickr8k_release(root, flat=True),
    "kaggle8k": flickr8k_kaggle,
    "karpathy-flickr8k": lambda root: karpathy_json(root, "flickr8k"),
    "karpathy-coco": lambda root: karpathy_json(root, "coco"),
    "coco-2017": coco_annotations,
    "coco-2014": lambda root: coco_annotations(root, "2014"),
    "imagefolder-splits": lambda root: imagefolder(root, "split-jsonl"),
    "imagefolder-csv": lambda root: imagefolder(root, "top-csv"),
}


def write(kind: str, root: Path) -> Copy:
    """The copy `kind` (a key of WRITERS) written into the new folder `root`."""
    root.mkdir(parents=True)
    return WRITERS[kind](root)
