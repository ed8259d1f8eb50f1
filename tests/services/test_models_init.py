"""The per-sample data's constructors (services/models.py ``_quick_init``: GpuSample, HostSample, Sample,
PodSnapshot), built per sample of every pod, store their fields without the dataclass ``__init__``'s
``object.__setattr__`` per field. What must hold: the same signature as the dataclass's own ``__init__`` (names,
order, defaults), every argument stored in its own field, omitted ones at their defaults, and the objects as
frozen (and as equal) as before.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from services import models
from services.models import GpuSample, HostSample, PodSnapshot, Sample

QUICK = [GpuSample, HostSample, Sample, PodSnapshot]


def _plain_twin(cls: type) -> type:
    """The same fields as a dataclass with its generated ``__init__``."""
    body = {f.name: f.default for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    body["__annotations__"] = {f.name: f.type for f in dataclasses.fields(cls)}
    return dataclasses.dataclass(frozen=True)(type(cls.__name__, (), body))


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: c.__name__)
def test_the_quick_constructor_stores_what_the_dataclass_one_would(cls):
    twin = _plain_twin(cls)
    assert inspect.signature(cls) == inspect.signature(twin)
    params = dataclasses.fields(cls)
    given = [object() for _ in params]  # one distinct value per field: a swapped or dropped one shows
    made = cls(*given)
    assert [getattr(made, f.name) for f in params] == given
    assert made == cls(**{f.name: v for f, v in zip(params, given)})
    assert made != cls(*given[:-1], object())
    required = [v for f, v in zip(params, given) if f.default is dataclasses.MISSING]
    short = cls(*required)
    ref = twin(*required)
    assert [getattr(short, f.name) for f in params] == [getattr(ref, f.name) for f in params]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, params[0].name, 1)
    with pytest.raises(TypeError):
        cls(*given, object())  # one too many


def test_a_sample_parsed_from_a_line_holds_every_field():
    line = (
        '{"v":1,"t":5.0,"source":"nvml","gpus":{"index":[0],"name":["H100"],"util":[50.0],"mem_used":[1],'
        '"mem_total":[2],"power_w":[300.0],"temp_c":[60.0]},"host":{"cpu_pct":1.5,"mem_used":3,"mem_total":4,'
        '"disk_used":5,"disk_total":6,"nofile_soft":7},"log":["a"],"metrics":["{}"]}'
    )
    s = Sample.from_line(line)
    assert s.gpus == (GpuSample(0, "H100", 50.0, 1, 2, 300.0, 60.0),)
    assert (s.gpus[0].util, s.gpus[0].mem_used, s.gpus[0].power_w, s.gpus[0].temp_c) == (50.0, 1, 300.0, 60.0)
    assert s.host == HostSample(1.5, 3, 4, 5, 6, 7)
    assert (s.t, s.source, s.log, s.metrics, s.procs) == (5.0, "nvml", ("a",), ("{}",), ())


def test_only_plain_fields_get_the_quick_constructor():
    with pytest.raises(TypeError, match="plain fields"):

        @models._quick_init
        @dataclasses.dataclass(frozen=True)
        class Listed:
            items: list = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="plain fields"):

        @models._quick_init
        @dataclasses.dataclass(frozen=True)
        class Checked:
            n: int

            def __post_init__(self) -> None:
                pass
