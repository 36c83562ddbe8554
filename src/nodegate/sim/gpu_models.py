"""Architecture and CUDA compute capability of a GPU, from what ``nvidia-smi -q -x`` prints.

A capture says ``<product_architecture>`` (drivers since about R470) and always
``<product_name>``; NVML's ``nvmlDeviceGetCudaComputeCapability`` has no XML element, so the
importer derives it here. The architecture string alone is not enough: Ampere is 8.0 (GA100)
or 8.6 (GA10x), Pascal 6.0 (GP100) or 6.1, Blackwell 10.0 (B200), 10.3 (B300) or 12.0
(RTX 50 / RTX PRO). So the product name decides where the architecture has more than one
capability, and a name or string missing from these tables is an error, never a guess.

Source: NVIDIA's CUDA GPUs page (developer.nvidia.com/cuda-gpus, "Compute Capability" per
product, as listed in 2025) for the capabilities; nvidia-smi's ``product_architecture`` strings
as seen in real captures (tests/sim/data/corpus) for the names. The official page could not be
fetched from this machine; the values were cross-read against public copies of it.
"""

from __future__ import annotations

import re

Capability = tuple[int, int]

#: ``<product_architecture>`` text (lower case) -> scenario architecture key; those keys map
#: to nvml.h's ``nvmlDeviceArchitecture_t`` in ``nodegate.sim.state.ARCHITECTURES``.
ARCHITECTURE_NAMES: dict[str, str] = {
    "kepler": "kepler",
    "maxwell": "maxwell",
    "pascal": "pascal",
    "volta": "volta",
    "turing": "turing",
    "ampere": "ampere",
    "ada lovelace": "ada",
    "ada": "ada",
    "hopper": "hopper",
    "blackwell": "blackwell",
}

#: Architectures whose discrete products all share one compute capability.
SINGLE_CAPABILITY: dict[str, Capability] = {
    "volta": (7, 0),
    "turing": (7, 5),
    "ada": (8, 9),
    "hopper": (9, 0),
}

# (product name pattern, architecture, compute capability), first match wins; matched
# case-insensitively against <product_name> ("NVIDIA A100-SXM4-80GB", "Tesla T4",
# "GRID P4-1Q" for a vGPU profile, "Quadro P400", "NVIDIA RTX 4000 SFF Ada Generation").
# Consumer lines carry "GeForce" so that "Quadro RTX 5000" (Turing) never reads as an RTX 50
# card; names shared across generations ("GTX TITAN X": Maxwell or Pascal) are left out.
_PRODUCTS: tuple[tuple[str, str, Capability], ...] = (
    # Blackwell
    (r"\bG?B300\b", "blackwell", (10, 3)),
    (r"\bG?B200\b", "blackwell", (10, 0)),
    (r"\bRTX PRO \d{4}\b.*\bBlackwell\b", "blackwell", (12, 0)),
    (r"\bGeForce RTX 50\d0\b", "blackwell", (12, 0)),
    # Hopper
    (r"\bG?H(100|200|800|20)\b", "hopper", (9, 0)),
    # Ada Lovelace
    (r"\bL(4|20|40|40S)\b", "ada", (8, 9)),
    (r"\bRTX \d{4}\b.*\bAda\b", "ada", (8, 9)),
    (r"\bGeForce RTX 40\d0\b", "ada", (8, 9)),
    # Ampere: GA100 is 8.0, GA10x is 8.6
    (r"\bA(100|800|30)\b", "ampere", (8, 0)),
    (r"\bA(2|10|10G|16|40)\b", "ampere", (8, 6)),
    (r"\bRTX A\d{3,4}\b", "ampere", (8, 6)),
    (r"\bGeForce RTX 30\d0\b", "ampere", (8, 6)),
    # Turing
    (r"\bT4\b", "turing", (7, 5)),
    (r"\bT(400|600|1000|1200)\b", "turing", (7, 5)),
    (r"\bQuadro RTX \d{4}\b", "turing", (7, 5)),
    (r"\bGeForce RTX 20\d0\b", "turing", (7, 5)),
    (r"\bGeForce GTX 16\d0\b", "turing", (7, 5)),
    (r"\bTITAN RTX\b", "turing", (7, 5)),
    # Volta
    (r"\bV100S?\b", "volta", (7, 0)),
    (r"\bTITAN V\b", "volta", (7, 0)),
    (r"\bQuadro GV100\b", "volta", (7, 0)),
    # Pascal: GP100 is 6.0, the rest 6.1
    (r"\b(Tesla |Quadro G)?P100\b", "pascal", (6, 0)),
    (r"\bP(4|6|40)\b", "pascal", (6, 1)),
    (r"\bQuadro P\d{3,4}\b", "pascal", (6, 1)),
    (r"\bGeForce GTX 10\d0\b", "pascal", (6, 1)),
    (r"\bGeForce GT 1030\b", "pascal", (6, 1)),
    (r"\bTITAN Xp\b", "pascal", (6, 1)),
    # Maxwell
    (r"\bM(4|6|40|60)\b", "maxwell", (5, 2)),
    (r"\bM10\b", "maxwell", (5, 0)),
    (r"\bGeForce GTX 9\d0\b", "maxwell", (5, 2)),
    (r"\bGeForce GTX 750\b", "maxwell", (5, 0)),
    # Kepler
    (r"\bK80\b", "kepler", (3, 7)),
    (r"\bK(20|20X|40)\b", "kepler", (3, 5)),
    (r"\bK(10|520)\b", "kepler", (3, 0)),
)
PRODUCTS = tuple((re.compile(p, re.IGNORECASE), arch, cc) for p, arch, cc in _PRODUCTS)


def architecture_key(text: str) -> str | None:
    """Scenario architecture for a ``<product_architecture>`` string, None when unknown."""
    return ARCHITECTURE_NAMES.get(" ".join(text.lower().split()))


def product_model(name: str) -> tuple[str, Capability] | None:
    """(architecture, compute capability) for a ``<product_name>``, None when not listed."""
    for pattern, arch, cc in PRODUCTS:
        if pattern.search(name):
            return arch, cc
    return None
