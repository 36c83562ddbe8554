"""The FSDP burn-in's settings and arithmetic (no torch): the model sized from HBM, its FLOPs
per token, the checkpoint's bytes, and the profile keys behind them.

Why a separate module: the plan (``nodegate.load.plan``) and the pre-flight checks must know
the model's size and the checkpoint's bytes before any worker starts, and the judge must
read them without torch.

Sizing. Training state per parameter, sharded over the ranks: an fp32 parameter, its fp32
gradient and AdamW's two fp32 moments, 16 bytes (the usual mixed-precision figure; bf16
compute copies are gathered one block at a time and freed). ``fsdp_hbm_fraction`` of every
GPU's memory (the profile's ``gpu.memory_mib``, which the quick checks hold to NVML's
total) times the ranks, divided by 16, is the parameter count; the model is the profile's
``fsdp_model`` with as many blocks as that count allows. Activations come on top of it:
the fraction is the state's share, so the default leaves most of HBM for them.

A checkpoint holds the parameters and both moments (12 bytes a parameter), not gradients.
"""

from __future__ import annotations

import math
import os
from typing import Any

from nodegate.errors import ConfigError

#: fp32 parameter + fp32 gradient + AdamW exp_avg + exp_avg_sq, per parameter.
STATE_BYTES_PER_PARAM = 16
#: What torch.distributed.checkpoint writes per parameter: the parameter and both moments.
CHECKPOINT_BYTES_PER_PARAM = 12
#: ``fsdp_hbm_fraction`` must lie in (0, MAX_FRACTION].
MAX_FRACTION = 0.98
#: Headroom on the checkpoint's bytes when checking free space (metadata, the file system).
SPACE_MARGIN = 1.1
#: The checkpoint directory's last component under the NVMe array's mount.
CHECKPOINT_SUBDIR = "nodegate-fsdp-checkpoint"

DEFAULTS: dict[str, Any] = {
    "fsdp_hbm_fraction": 0.2,
    "fsdp_seconds": 60.0,
    "fsdp_steps": 100000,  # a cap: the seconds govern on a GPU
    "fsdp_min_steps": 8,  # loss-falling needs a few steps even at a tiny scale
    "fsdp_checkpoint_every": 20,
    "fsdp_checkpoint_dir": None,  # None: <nvme.mountpoint>/nodegate-fsdp-checkpoint
    "fsdp_model": {"vocab": 32000, "d_model": 4096, "heads": 32, "seq_len": 2048,
                   "batch": 2, "lr": 1e-4},
}
#: On CPU/gloo: a fixed small model (seconds, not hours, on 2 cores), never sized from RAM.
CPU_MODEL: dict[str, Any] = {"vocab": 64, "d_model": 32, "layers": 2, "heads": 2,
                             "seq_len": 16, "batch": 4, "lr": 3e-3}


def block_params(d_model: int) -> int:
    """One pre-norm transformer block: qkv (3d^2 + 3d), output projection (d^2 + d), MLP
    d -> 4d -> d (8d^2 + 5d), two LayerNorms (4d): 12d^2 + 13d."""
    return 12 * d_model * d_model + 13 * d_model


def n_params(model: dict[str, Any]) -> int:
    """Token and position embeddings, the blocks, the final LayerNorm, the untied head."""
    d, vocab, seq = int(model["d_model"]), int(model["vocab"]), int(model["seq_len"])
    return vocab * d + seq * d + int(model["layers"]) * block_params(d) + 2 * d + vocab * d


def flops_per_token(model: dict[str, Any]) -> float:
    """Model FLOPs of one trained token: 6N for the matmuls of forward and backward plus
    12 x layers x d_model x seq_len for attention's score and value products (Chowdhery et
    al. 2022, PaLM, appendix B: the "model FLOPs" behind MFU; recomputation not counted)."""
    return (6.0 * n_params(model)
            + 12.0 * int(model["layers"]) * int(model["d_model"]) * int(model["seq_len"]))


def checkpoint_bytes(model: dict[str, Any]) -> int:
    return CHECKPOINT_BYTES_PER_PARAM * n_params(model)


def sized(model: dict[str, Any], memory_bytes: int, fraction: float, world: int) -> dict[str, Any]:
    """``model`` with ``layers`` set so its training state fills ``fraction`` of ``world``
    GPUs of ``memory_bytes`` each (at least one block)."""
    d = int(model["d_model"])
    budget = fraction * memory_bytes * world / STATE_BYTES_PER_PARAM
    fixed = n_params({**model, "layers": 0})
    layers = max(1, math.floor((budget - fixed) / block_params(d)))
    return {**model, "layers": layers}


def _number(load: dict[str, Any], key: str) -> float:
    value = load.get(key, DEFAULTS[key])
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"must be a non-negative number, not {value!r}", key=f"load.{key}")
    return float(value)


def settings(profile: dict[str, Any], duration_scale: float, min_phase_seconds: float
             ) -> dict[str, Any]:
    """The FSDP phase's settings from a resolved profile (plain data: it rides in the
    report's load config). Raises ConfigError naming the key on a bad value."""
    load = dict(profile.get("load") or {})
    fraction = _number(load, "fsdp_hbm_fraction")
    if not 0 < fraction <= MAX_FRACTION:
        raise ConfigError(f"must lie in (0, {MAX_FRACTION}], not {fraction}",
                          key="load.fsdp_hbm_fraction")
    every = int(_number(load, "fsdp_checkpoint_every"))
    if every < 1:
        raise ConfigError(f"must be at least 1, not {every}", key="load.fsdp_checkpoint_every")
    min_steps = max(1, int(_number(load, "fsdp_min_steps")))
    model = {**DEFAULTS["fsdp_model"], **(load.get("fsdp_model") or {})}
    memory_mib = (profile.get("gpu") or {}).get("memory_mib")
    mount = (profile.get("nvme") or {}).get("mountpoint")
    directory = load.get("fsdp_checkpoint_dir")
    if directory is None:
        directory = os.path.join(mount, CHECKPOINT_SUBDIR) if mount else None
    return {
        "fraction": fraction,
        "seconds": max(min_phase_seconds, _number(load, "fsdp_seconds") * duration_scale),
        "steps": max(min_steps, round(_number(load, "fsdp_steps") * min(1.0, duration_scale))),
        "min_steps": min_steps,
        "checkpoint_every": every,
        "checkpoint_dir": directory,
        "configured_dir": load.get("fsdp_checkpoint_dir") is not None,
        "array_mount": mount,
        "memory_bytes": int(memory_mib) * 2**20 if memory_mib else None,
        "model": model,
        "sized": "layers" not in model,
    }


def resolve(fsdp: dict[str, Any], *, cuda: bool, world: int) -> dict[str, Any]:
    """The model this run trains: the CPU model on CPU/gloo (unless the profile names
    layers), else the profile's model sized from HBM. Adds its parameter count."""
    model = dict(fsdp["model"])
    how = "profile"
    if not cuda and fsdp.get("sized", True):
        model, how = dict(CPU_MODEL), "cpu: fixed small model"
    elif "layers" not in model:
        if not fsdp.get("memory_bytes"):
            raise ConfigError("no gpu.memory_mib to size the FSDP model from (or set "
                              "load.fsdp_model.layers)", key="gpu.memory_mib")
        model = sized(model, int(fsdp["memory_bytes"]), float(fsdp["fraction"]), world)
        how = (f"sized: {fsdp['fraction']:.2f} of {fsdp['memory_bytes'] / 1e9:.1f} GB x "
               f"{world} GPU(s) at {STATE_BYTES_PER_PARAM} B of state per parameter")
    return {**fsdp, "model": model, "sizing": how, "n_params": n_params(model),
            "flops_per_token": flops_per_token(model),
            "checkpoint_bytes": checkpoint_bytes(model)}


def step_seconds(fsdp: dict[str, Any], tflops_per_gpu: float) -> float:
    """One training step at ``tflops_per_gpu`` model TFLOPS (every rank trains batch x
    seq_len tokens a step)."""
    model = fsdp["model"]
    tokens = int(model["batch"]) * int(model["seq_len"])
    return flops_per_token(model) * tokens / (tflops_per_gpu * 1e12)


def preflight(fsdp: dict[str, Any]) -> dict[str, Any]:
    """Before any load starts: the checkpoint directory exists (made if need be), takes a
    file, and (once the model is resolved) its file system holds the checkpoint with margin.
    Raises ConfigError naming the path (exit 2). Returns what was found (evidence: on the
    NVMe array's mount or not)."""
    path = fsdp.get("checkpoint_dir")
    mount = str(fsdp.get("array_mount") or "")
    mounted = bool(mount) and os.path.ismount(mount)
    if not path:
        raise ConfigError("no checkpoint directory: set load.fsdp_checkpoint_dir or "
                          "nvme.mountpoint", key="load.fsdp_checkpoint_dir")
    if not fsdp.get("configured_dir") and not mounted:
        # never fill the root file system under an unmounted array's directory
        raise ConfigError(f"the NVMe array's mount {mount} is not mounted here: mount it or "
                          "set load.fsdp_checkpoint_dir", key="load.fsdp_checkpoint_dir")
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".nodegate-write-probe-{os.getpid()}")
        with open(probe, "wb") as fh:
            fh.write(b"nodegate")
        os.unlink(probe)
        stat = os.statvfs(path)
    except OSError as exc:
        raise ConfigError(f"checkpoint directory not writable: {exc.strerror or exc}",
                          file=path) from None
    free = stat.f_bavail * stat.f_frsize
    need = int(fsdp.get("checkpoint_bytes", 0) * SPACE_MARGIN)
    if free < need:
        raise ConfigError(f"checkpoint directory has {free / 1e9:.1f} GB free, the FSDP "
                          f"checkpoint needs {need / 1e9:.1f} GB", file=path)
    on_array = mounted and _under(path, mount)
    where = (f"on the NVMe array's mount {mount}" if on_array else
             "configured path; the profile names no NVMe array mount" if not mount else
             f"configured path; no NVMe array mounted at {mount}" if not mounted else
             f"configured path, not on the NVMe array's mount {mount}")
    return {"checkpoint_dir": path, "on_array": on_array, "where": where, "free_bytes": free,
            "need_bytes": need}


def _under(path: str, mount: str) -> bool:
    """``path`` is on the file system mounted at ``mount`` (same device)."""
    try:
        return os.stat(path).st_dev == os.stat(mount).st_dev
    except OSError:
        return False
