"""The ``load:`` section of a resolved profile, scaled for one run.

Durations shrink with ``duration_scale`` (tests and the lab run at 0.02); each phase keeps a
floor so a scaled run still loads every GPU long enough to be measured, and the soak keeps a
longer floor so a simulated board's temperature has time to respond (its time constant is ~2 s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nodegate.errors import ConfigError
from nodegate.load import fsdp_size
from nodegate.vocabulary import DTYPES
from nodegate.vocabulary import LOAD_LEVELS as LEVELS

#: Defaults for keys a profile may leave out (the additional keys this package proposes).
DEFAULTS: dict[str, Any] = {
    "dtypes": ["bf16"],
    "gemm_size": 8192,
    "gemm_seconds": 30.0,
    "hbm_bytes": 1 << 30,
    "copy_bytes": 1 << 28,
    "p2p_bytes": 1 << 28,
    "allreduce_max_bytes": 1 << 30,
    "burnin_steps": 400,
    "burnin_seconds": 300.0,
    "soak_seconds": 180.0,  # after both burn-ins: the GPUs start it hot (docs/load-checks.md)
    "sample_hz": 1.0,
    "collective_timeout_s": 300.0,
    # proposed by this package
    "min_phase_seconds": 0.5,  # floor of every scaled timed phase
    "soak_min_seconds": 6.0,  # floor of the scaled soak: telemetry must see a response
    "burnin_min_steps": 8,  # loss-falling needs a few steps even at a tiny scale
    "power_settle_s": 5.0,  # GEMM-class load before power under load is judged
    "copy_iters": 5,  # timed repetitions of each bandwidth copy (after one warm-up)
    "allreduce_steps": 5,  # sizes in the all-reduce sweep (max, max/4, ...)
    "multinode_max_bytes": 1 << 30,  # the two-node all-reduce is judged at this size
    "multinode_ranks_per_node": None,  # None: one rank per GPU of the profile
    "burnin_model": {"vocab": 256, "d_model": 512, "layers": 4, "heads": 8,
                     "seq_len": 512, "batch": 8, "lr": 3e-4},
    # acceptance: GEMM in further dtypes, and the whole-HBM pattern test
    "acceptance_dtypes": [],  # run at acceptance after load.dtypes, each for dtype_gemm_seconds
    "dtype_gemm_seconds": 30.0,
    "hbm_test_fraction": 0.90,  # of each GPU's free memory, in (0, MAX_FRACTION]
    "hbm_test_seconds": 60.0,
    "hbm_test_cpu_bytes": 4 << 20,  # the stand-in "free memory" of a CPU worker
    "hbm_test_chunk_bytes": 256 << 20,  # pattern temporaries are a few times this
}
#: The largest fraction of a GPU's free memory a phase may take: the rest holds the CUDA
#: context's growth, NCCL's buffers and the phase's own temporaries.
MAX_FRACTION = 0.98
#: The burn-in model on CPU/gloo when the profile names none: seconds, not hours, on 2 cores.
CPU_BURNIN_MODEL: dict[str, Any] = {"vocab": 64, "d_model": 32, "layers": 1, "heads": 2,
                                    "seq_len": 16, "batch": 4, "lr": 3e-3}


@dataclass(frozen=True)
class LoadConfig:
    """What one run of the load phases does: sizes in bytes/elements, durations in seconds."""

    level: str
    dtypes: tuple[str, ...]
    gemm_size: int
    gemm_seconds: float
    hbm_bytes: int
    copy_bytes: int
    p2p_bytes: int
    allreduce_max_bytes: int
    allreduce_steps: int
    burnin_steps: int
    burnin_min_steps: int
    burnin_seconds: float
    soak_seconds: float
    sample_hz: float
    collective_timeout_s: float
    copy_iters: int
    power_settle_s: float = 5.0
    burnin_model: dict[str, Any] = field(default_factory=dict)
    duration_scale: float = 1.0
    fsdp: dict[str, Any] = field(default_factory=dict)  # nodegate.load.fsdp_size.settings
    acceptance_dtypes: tuple[str, ...] = ()
    dtype_gemm_seconds: float = 30.0
    hbm_test_fraction: float = 0.90
    hbm_test_seconds: float = 60.0
    hbm_test_cpu_bytes: int = 4 << 20
    hbm_test_chunk_bytes: int = 256 << 20
    gpu_memory_bytes: int = 0  # the profile's gpu.memory_mib (0: not set): the plan's sizes
    #: the battery's storage phases at this level (battery.storage), for the plan only:
    #: "fio" (nvme.fio) and "dcgm" (dcgm.diag_level) -> planned seconds
    storage_s: dict[str, float] = field(default_factory=dict)

    @property
    def acceptance(self) -> bool:
        return self.level == "acceptance"

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def _number(load: dict[str, Any], key: str) -> float:
    value = load.get(key, DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"must be a non-negative number, not {value!r}", key=f"load.{key}")
    return float(value)


def fraction(load: dict[str, Any], key: str) -> float:
    """A fraction of a GPU's memory: in (0, MAX_FRACTION], else ConfigError naming the key
    (exit 2, before any load starts)."""
    value = load.get(key, DEFAULTS[key])
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not 0 < value <= MAX_FRACTION):
        raise ConfigError(f"must be a fraction in (0, {MAX_FRACTION}], not {value!r}",
                          key=f"load.{key}")
    return float(value)


def _dtypes(load: dict[str, Any], key: str) -> tuple[str, ...]:
    dtypes = tuple(load.get(key) or DEFAULTS[key])
    for dtype in dtypes:
        if dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {dtype!r} (one of {', '.join(DTYPES)})",
                              key=f"load.{key}")
    return dtypes


def from_profile(profile: dict[str, Any], level: str, duration_scale: float = 1.0) -> LoadConfig:
    """Read ``profile["load"]``; raise ConfigError naming the key on a bad value."""
    if level not in LEVELS:
        raise ConfigError(f"level must be one of {', '.join(LEVELS)}, not {level!r}", key="level")
    if not duration_scale > 0:
        raise ConfigError(f"duration scale must be > 0, not {duration_scale}",
                          key="duration_scale")
    load = dict(profile.get("load") or {})
    dtypes = tuple(load.get("dtypes") or DEFAULTS["dtypes"])
    for dtype in dtypes:
        if dtype not in DTYPES:
            raise ConfigError(f"unknown dtype {dtype!r} (one of {', '.join(DTYPES)})",
                              key="load.dtypes")
    floor = _number(load, "min_phase_seconds")

    def scaled(key: str, minimum: float) -> float:
        return max(minimum, _number(load, key) * duration_scale)

    model = dict(DEFAULTS["burnin_model"])
    model.update(load.get("burnin_model") or {})
    steps = int(_number(load, "burnin_steps"))
    return LoadConfig(
        level=level,
        dtypes=dtypes,
        gemm_size=max(16, int(_number(load, "gemm_size"))),
        gemm_seconds=scaled("gemm_seconds", floor),
        hbm_bytes=max(4096, int(_number(load, "hbm_bytes"))),
        copy_bytes=max(4096, int(_number(load, "copy_bytes"))),
        p2p_bytes=max(4096, int(_number(load, "p2p_bytes"))),
        allreduce_max_bytes=max(4096, int(_number(load, "allreduce_max_bytes"))),
        allreduce_steps=max(1, int(_number(load, "allreduce_steps"))),
        burnin_steps=max(int(_number(load, "burnin_min_steps")),
                         round(steps * min(1.0, duration_scale))),
        burnin_min_steps=int(_number(load, "burnin_min_steps")),
        burnin_seconds=scaled("burnin_seconds", floor),
        soak_seconds=scaled("soak_seconds", _number(load, "soak_min_seconds")),
        sample_hz=max(1.0, _number(load, "sample_hz")),
        collective_timeout_s=max(5.0, _number(load, "collective_timeout_s")),
        copy_iters=max(1, int(_number(load, "copy_iters"))),
        power_settle_s=_number(load, "power_settle_s"),
        burnin_model=model,
        duration_scale=duration_scale,
        fsdp=fsdp_size.settings(profile, duration_scale, floor),
        acceptance_dtypes=tuple(d for d in _dtypes(load, "acceptance_dtypes")
                                if d not in dtypes),
        dtype_gemm_seconds=scaled("dtype_gemm_seconds", floor),
        hbm_test_fraction=fraction(load, "hbm_test_fraction"),
        hbm_test_seconds=scaled("hbm_test_seconds", floor),
        hbm_test_cpu_bytes=max(4096, int(_number(load, "hbm_test_cpu_bytes"))),
        hbm_test_chunk_bytes=max(4096, int(_number(load, "hbm_test_chunk_bytes"))),
        gpu_memory_bytes=int((profile.get("gpu") or {}).get("memory_mib") or 0) << 20,
        storage_s=_storage_seconds(profile, level),
    )


def _storage_seconds(profile: dict[str, Any], level: str) -> dict[str, float]:
    """The fio and DCGM phases' planned seconds at ``level`` (0 entries left out)."""
    from nodegate.probes import dcgm, fio

    out: dict[str, float] = {}
    if level != "quick":
        out["fio"] = fio.planned_seconds((profile.get("nvme") or {}).get("fio"))
    levels = (profile.get("dcgm") or {}).get("diag_level") or {}
    diag = int(levels.get(level) or 0) if isinstance(levels, dict) else 0
    out["dcgm"] = dcgm.LEVEL_SECONDS.get(diag, 0.0)
    return {k: v for k, v in out.items() if v > 0}
