"""``hf:NAME[:SPLIT]`` sources through the Hugging Face ``datasets`` library."""

from pathlib import Path

from ..core.errors import UserError


def open_hf(text, seed, needed):
    """Open ``hf:NAME[:SPLIT]`` and take ``needed`` examples, shuffled with ``seed``.

    NAME is a hub dataset id (streamed, never downloaded whole) or a local folder written
    by ``Dataset.save_to_disk``. The image column is the first ``Image`` feature; the label
    column is ``label`` when present.

    Raises:
        UserError: the dataset cannot be opened or has no image column.
    """
    from .images import ImageSet, to_rgb

    name, _, split_name = text[3:].partition(":")
    if not name:
        raise UserError(f"--data {text}: no dataset name; valid: hf:NAME[:SPLIT]")
    split_name = split_name or "validation"
    ds = _open(name, split_name, text)
    image_col, label_col = _columns(ds, text)
    examples = list(ds.shuffle(seed=seed, buffer_size=1000).take(needed or 64))
    if not examples:
        raise UserError(f"--data {text}: the split is empty")
    loaders = [
        _loader(ex[image_col], f"--data {text}: example {i}", to_rgb)
        for i, ex in enumerate(examples)
    ]
    labels = [int(ex[label_col]) for ex in examples] if label_col else None
    keys = [f"{seed}:{i}" for i in range(len(examples))]
    source = f"the dataset's column {label_col}"
    return ImageSet(text, loaders, labels, keys, label_source=source, drawn=True)


def _loader(image, where, to_rgb):
    """``() -> PIL.Image``: ``image`` (a decoded ``PIL.Image``) in RGB, its errors naming the
    example ``where`` it came from (the dataset and its place in the drawn order)."""

    def load():
        try:
            return to_rgb(image)
        except UserError as e:
            raise UserError(f"{where}: {e}") from e
        except (OSError, ValueError) as e:  # Pillow's errors for an image it cannot convert
            raise UserError(f"{where}: cannot read its image ({type(e).__name__}: {e})") from e

    return load


def _open(name, split_name, text):
    import datasets

    try:
        if Path(name).is_dir() and (Path(name) / "dataset_info.json").exists():
            return datasets.load_from_disk(name).to_iterable_dataset()
        if Path(name).is_dir() and (Path(name) / split_name / "dataset_info.json").exists():
            return datasets.load_from_disk(name)[split_name].to_iterable_dataset()
        _check_hub_reachable(text)
        return datasets.load_dataset(name, split=split_name, streaming=True)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - datasets raises many kinds; all mean "cannot open"
        raise UserError(f"--data {text}: cannot open with datasets: {e}") from e


HUB_TIMEOUT_S = 3.0  # one TCP connect; datasets' own retries took 28 s offline


def _check_hub_reachable(text):
    """Fail fast, in one line, when the Hugging Face hub cannot be reached: a hub dataset
    streams from it, and without a network ``datasets`` retries for about half a minute,
    warning at each try.

    Raises:
        UserError: the hub's host does not answer a TCP connect within ``HUB_TIMEOUT_S``.
    """
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants

    url = urlparse(constants.ENDPOINT)
    host, port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=HUB_TIMEOUT_S).close()
    except OSError as e:
        raise UserError(
            f"--data {text}: the Hugging Face hub ({host}) cannot be reached ({e}); hub "
            "datasets stream from it: use a folder written by Dataset.save_to_disk, or an "
            "image folder"
        ) from None


def _columns(ds, text):
    import datasets

    features = ds.features or {}
    images = [k for k, v in features.items() if isinstance(v, datasets.Image)]
    if not images:
        raise UserError(f"--data {text}: no Image column; columns: {list(features)}")
    return images[0], ("label" if "label" in features else None)
