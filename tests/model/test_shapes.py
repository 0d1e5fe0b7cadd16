"""Models built for their shapes alone (cramming.model.shapes): the same parameters as on the meta device, built
without filling them, and without the 2 s import of torch._dynamo that a meta random fill costs."""

import pytest
import torch

from cramming.model import build_classifier, build_mlm_model
from cramming.model.shapes import shapes_only
from tests.commands import modules_after

from .conftest import SCHEMES, arch_config


def layout(model: torch.nn.Module) -> dict:
    return {key: (tuple(tensor.shape), tensor.dtype, tensor.device.type) for key, tensor in model.state_dict().items()}


@pytest.mark.parametrize("scheme, norm", SCHEMES)
def test_the_same_parameters_as_on_the_meta_device(scheme, norm):
    cfg = arch_config("crammed-bert-tiny", f"init_scheme={scheme}", f"norm_scheme={norm}")
    for build in (lambda: build_mlm_model(cfg, 300), lambda: build_classifier(cfg, 300, 3)):
        with torch.device("meta"):
            expected = layout(build())
        with shapes_only():
            built = layout(build())
        assert built == expected and {device for *_, device in built.values()} == {"meta"}


def test_tensors_with_values_are_still_filled():
    values = torch.zeros(64)
    with shapes_only():
        torch.nn.init.normal_(values)
        empty = torch.empty(3)
    assert values.std() > 0.5 and empty.is_meta


def test_building_for_shapes_does_not_import_dynamo():
    build = ("from cramming.model import build_mlm_model\nfrom cramming.model.shapes import shapes_only\n"
             "from tests.model.conftest import arch_config\n"
             "with shapes_only():\n    build_mlm_model(arch_config('crammed-bert'), 32768)")
    assert "torch._dynamo" not in modules_after(build)
