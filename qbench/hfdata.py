"""``hf:NAME[:SPLIT]`` sources through the Hugging Face ``datasets`` library."""

from pathlib import Path

from .errors import UserError


def open_hf(text, seed, needed):
    """Open ``hf:NAME[:SPLIT]`` and take ``needed`` examples, shuffled with ``seed``.

    NAME is a hub dataset id (streamed, never downloaded whole) or a local folder written
    by ``Dataset.save_to_disk``. The image column is the first ``Image`` feature; the label
    column is ``label`` when present.

    Raises:
        UserError: the dataset cannot be opened or has no image column.
    """
    from .data import ImageSet, to_rgb

    name, _, split_name = text[3:].partition(":")
    if not name:
        raise UserError(f"--data {text}: no dataset name; valid: hf:NAME[:SPLIT]")
    split_name = split_name or "validation"
    ds = _open(name, split_name, text)
    image_col, label_col = _columns(ds, text)
    examples = list(ds.shuffle(seed=seed, buffer_size=1000).take(needed or 64))
    if not examples:
        raise UserError(f"--data {text}: the split is empty")
    loaders = [lambda im=ex[image_col]: to_rgb(im) for ex in examples]
    labels = [int(ex[label_col]) for ex in examples] if label_col else None
    keys = [f"{seed}:{i}" for i in range(len(examples))]
    source = f"the dataset's column {label_col}"
    return ImageSet(text, loaders, labels, keys, label_source=source, drawn=True)


def _open(name, split_name, text):
    import datasets

    try:
        if Path(name).is_dir() and (Path(name) / "dataset_info.json").exists():
            return datasets.load_from_disk(name).to_iterable_dataset()
        if Path(name).is_dir() and (Path(name) / split_name / "dataset_info.json").exists():
            return datasets.load_from_disk(name)[split_name].to_iterable_dataset()
        return datasets.load_dataset(name, split=split_name, streaming=True)
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds; all mean "cannot open"
        raise UserError(f"--data {text}: cannot open with datasets: {e}") from e


def _columns(ds, text):
    import datasets

    features = ds.features or {}
    images = [k for k, v in features.items() if isinstance(v, datasets.Image)]
    if not images:
        raise UserError(f"--data {text}: no Image column; columns: {list(features)}")
    return images[0], ("label" if "label" in features else None)
