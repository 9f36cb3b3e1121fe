"""Model registry and weight resolution; model names as a person types them."""

import pytest

from qbench.core.errors import UserError
from qbench.model import zoo


def test_random_initialisation_is_reproducible():
    a, b = zoo.load_model("resnet18"), zoo.load_model("resnet18")
    if not a.random_weights:
        pytest.skip("pretrained resnet18 weights are available here")
    assert a.weights_digest == b.weights_digest


def test_unknown_model_suggests_close_names():
    with pytest.raises(UserError, match="resnet18"):
        zoo.get_spec("resnet19")


def test_lite0_spec_uses_tf_lite_normalisation():
    pre = zoo.get_spec("efficientnet_lite0").preprocess
    assert pre.mean == pytest.approx((127 / 255,) * 3) and pre.std == pytest.approx(
        (128 / 255,) * 3
    )


@pytest.mark.parametrize(
    "spec, name",
    [
        ("resnet18", "resnet18"),
        ("m.py:build", "m.py:build"),
        ("./models/m.py:build", "m.py:build"),
        ("/ci/work/models/m.py:build", "m.py:build"),
        ("../exported/net.pt2", "net.pt2"),
    ],
)
def test_model_id_names_a_file_model_by_its_base_name(spec, name):
    assert zoo.model_id(spec) == name


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("efficientnet-lite0", "efficientnet_lite0"),
        ("ResNet18", "resnet18"),
        ("mobilenetv2", "mobilenet_v2"),
    ],
)
def test_close_names_match_as_a_person_would(typed, meant):
    """Issue 20: Case and '-' against '_' do not count; the intended name is suggested first."""
    with pytest.raises(UserError) as err:
        zoo.get_spec(typed)
    assert f"close names: {meant}," in str(err.value)


def test_a_name_close_to_none_lists_no_unrelated_names():
    """A name close to no registered one says so and where the list is (it had listed the
    first 8 names alphabetically as 'close names')."""
    with pytest.raises(UserError) as err:
        zoo.get_spec("nosuchmodel")
    message = str(err.value)
    assert "no registered name is close" in message and "alexnet" not in message
    assert f"`qbench models` lists the {len(zoo.list_models())}" in message


def test_model_loading_prints_nothing_on_stdout(capsys):
    """Issue 20: loading a model prints nothing on stdout."""
    zoo.load_model("efficientnet_lite0")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    "name, interpolation", [("efficientnet_b0", "bicubic"), ("resnet18", "bilinear")]
)
def test_torchvision_models_are_preprocessed_as_their_published_weights(
    imagenet_sample, name, interpolation
):
    """qbench's transform of a photo equals torchvision's own evaluation transform of the
    model's weights (efficientnet_b0's resizes bicubic); the default bilinear stays out of
    the run's definition, so baselines from before the field stay comparable."""
    import torch
    import torchvision
    from PIL import Image

    from qbench.data.batches import transform

    pre = zoo._torchvision_spec(name).preprocess
    assert pre.interpolation == interpolation
    assert ("interpolation" in pre.as_dict()) == (interpolation != "bilinear")
    published = torchvision.models.get_model_weights(name).DEFAULT.transforms()
    for path in sorted(imagenet_sample.rglob("*.JPEG"))[:3]:
        image = Image.open(path).convert("RGB")
        torch.testing.assert_close(transform(pre)(image), published(image), rtol=0, atol=1e-6)
