"""Loading ``--model`` and ``--weights`` as a new user meets them: a weights file replaces
the registry's download, a state dict that does not fit names its keys, and a model file
without ``:FUNCTION`` lists the functions it defines."""

import sys

import pytest
import torch
import torchvision

from qbench.core.errors import UserError
from qbench.model import zoo

NAME = "shufflenet_v2_x0_5"  # small (1.4 M parameters), as the user's report had it


@pytest.fixture
def own_weights(tmp_path):
    """A state dict of ``NAME`` with its own random initialisation, in a file."""
    torch.manual_seed(5)
    state = torchvision.models.get_model(NAME, weights=None).state_dict()
    path = tmp_path / "weights.pt"
    torch.save(state, path)
    return path, state


def test_a_weights_file_is_loaded_without_fetching_the_registry_weights(own_weights, monkeypatch):
    path, state = own_weights

    def fetch(name):
        raise AssertionError(f"pretrained weights of {name} fetched")

    monkeypatch.setattr(zoo, "_torchvision", fetch)
    model = zoo.load_model(NAME, weights_path=str(path))
    assert model.weights == f"file:{path}" and not model.random_weights
    loaded = model.module.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())


def test_a_state_dict_missing_and_adding_keys_names_them_with_counts(own_weights, tmp_path):
    _, state = own_weights
    state = dict(state)
    del state["fc.weight"], state["fc.bias"]
    state["head.weight"] = torch.zeros(2)
    path = tmp_path / "edited.pt"
    torch.save(state, path)
    with pytest.raises(UserError) as e:
        zoo.load_model(NAME, weights_path=str(path))
    text = str(e.value)
    assert "2 missing: fc.weight, fc.bias" in text and "1 unexpected: head.weight" in text


def test_another_architectures_state_dict_names_the_first_keys_and_the_totals(tmp_path):
    state = torchvision.models.get_model("squeezenet1_0", weights=None).state_dict()
    path = tmp_path / "squeezenet.pt"
    torch.save(state, path)
    own = len(torchvision.models.get_model(NAME, weights=None).state_dict())
    with pytest.raises(UserError) as e:
        zoo.load_model(NAME, weights_path=str(path))
    text = str(e.value)
    assert f"not a state dict for {NAME} ({own} keys)" in text
    assert f"{own} missing: conv1.0.weight" in text and f"({own} in all)" in text
    assert f"{len(state)} unexpected: " in text and f"({len(state)} in all)" in text


def test_a_weight_of_the_wrong_shape_is_named(own_weights, tmp_path):
    _, state = own_weights
    state = dict(state, **{"fc.bias": torch.zeros(7)})
    path = tmp_path / "shape.pt"
    torch.save(state, path)
    with pytest.raises(UserError, match=r"does not fit .*size mismatch for fc\.bias"):
        zoo.load_model(NAME, weights_path=str(path))


@pytest.mark.parametrize(
    "source, expected",
    [
        (
            "import torch\n\ndef small():\n    pass\n\ndef large():\n    pass\n",
            "{p}:small, {p}:large",
        ),
        ("import torch\nMODEL = None\n", "its top-level functions: none"),
    ],
)
def test_a_model_file_without_function_lists_its_functions(tmp_path, source, expected):
    path = tmp_path / "mynets.py"
    path.write_text(source)
    with pytest.raises(UserError) as e:
        zoo.load_model(str(path))
    text = str(e.value)
    assert "a model file needs :FUNCTION" in text and "alexnet" not in text
    assert expected.format(p=path) in text


def test_a_model_file_imports_the_modules_beside_it(tmp_path):
    """``FILE.py:FUNCTION`` runs with FILE's folder on ``sys.path``, as ``python FILE.py``
    would: a model file importing its sibling ``blocks.py`` loads (it had failed with
    ModuleNotFoundError), and ``sys.path`` is as before afterwards."""
    (tmp_path / "qbench_test_blocks.py").write_text(
        "import torch\n\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(12, 4)\n\n"
        "    def forward(self, x):\n"
        "        return self.fc(x.flatten(1))\n"
    )
    (tmp_path / "model.py").write_text(
        "from qbench_test_blocks import Net\n\ndef net():\n    return Net().eval(), (1, 2, 6)\n"
    )
    before = list(sys.path)
    model = zoo.load_model(f"{tmp_path / 'model.py'}:net")
    assert type(model.module).__name__ == "Net" and model.input_shape == (1, 2, 6)
    assert sys.path == before


def test_a_spec_dicts_numpy_float32_mean_and_std_enter_the_definition(tmp_path):
    """A model file's (module, dict) whose mean and std are NumPy float32 arrays: the
    preprocessing holds Python floats of the same values, so the run's definition is JSON (it
    had ended a whole run with exit 3: float32 is not JSON serializable)."""
    from qbench.measure.provenance import digest

    (tmp_path / "m.py").write_text(
        "import numpy as np\n"
        "from torch import nn\n"
        "def build():\n"
        "    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())\n"
        "    mean = np.array([0.5, 0.25, 0.125], np.float32)\n"
        "    return net.eval(), {'input_shape': (3, 8, 8), 'mean': mean, 'std': mean * 2}\n"
    )
    pre = zoo.load_model(f"{tmp_path / 'm.py'}:build").preprocess
    assert pre.mean == (0.5, 0.25, 0.125) and pre.std == (1.0, 0.5, 0.25)
    assert all(type(v) is float for v in pre.mean + pre.std)
    assert len(digest({"mean": pre.mean, "std": pre.std})) == 64  # JSON: no TypeError
    with pytest.raises(UserError, match="bad input_shape/mean/std"):
        (tmp_path / "bad.py").write_text(
            "from torch import nn\n"
            "def build():\n"
            "    return nn.Conv2d(3, 4, 3).eval(), {'mean': ['a', 'b', 'c']}\n"
        )
        zoo.load_model(f"{tmp_path / 'bad.py'}:build")
