"""The host checks (operating system), declared once (``nodegate.judge.declare``).

``nodegate.judge.host:judge_host`` emits the driver and platform checks and the array's;
``nodegate.judge.storage:judge_devices`` emits the NVMe SMART checks (one result per drive).
"""

from __future__ import annotations

from nodegate.judge.declare import Check, check
from nodegate.profiles.threshold_keys import Feature, Key
from nodegate.vocabulary import Group, Level, Subject

HOST = "nodegate.judge.host:judge_host"
SMART = "nodegate.judge.storage:judge_devices"
S = Subject


def _host(name: str, subject: Subject, meaning: str, *keys: Key, judge: str = HOST,
          fallback: tuple[Key, ...] = (), requires: tuple[Feature, ...] = ()) -> Check:
    return check(name, meaning, judge, *keys, subject=subject, group=Group.HOST,
                 level=Level.QUICK, fallback=fallback, requires=requires)


ON_SMART = (Feature.NVME_SMART,)

CHECKS: tuple[Check, ...] = (
    _host("nouveau_absent", S.DRIVERS, "nouveau not loaded"),
    _host("nvidia_module", S.DRIVERS, "nvidia module of the pinned version loaded"),
    _host("persistenced_service", S.DRIVERS, "nvidia-persistenced active"),
    _host("fabricmanager_service", S.DRIVERS,
          "nvidia-fabricmanager active at the driver's version",
          requires=(Feature.FABRICMANAGER,)),
    _host("gpudirect_rdma", S.DRIVERS,
          "GPUDirect RDMA as declared: peermem loaded, or DMA-BUF ready"),
    _host("iommu_mode", S.PLATFORM, "IOMMU mode on the kernel command line"),
    _host("pcie_acs", S.PLATFORM, "ACS disabled on bridges above the GPUs",
          requires=(Feature.ACS,)),
    _host("nccl_conf", S.PLATFORM, "/etc/nccl.conf present with expected keys"),
    _host("nvme_array", S.NVME, "NVMe md array active and complete",
          requires=(Feature.NVME_ARRAY,)),
    _host("nvme_mount", S.NVME, "NVMe array mounted with expected options",
          requires=(Feature.NVME_ARRAY,)),
    # SMART health per drive (nvme-cli JSON), when the profile sets nvme.smart
    _host("nvme_critical_warning", S.NVME, "NVMe SMART critical warning clear", judge=SMART,
          requires=ON_SMART),
    _host("nvme_spare", S.NVME, "NVMe available spare above its threshold", judge=SMART,
          requires=ON_SMART),
    _host("nvme_media_errors", S.NVME, "NVMe media and data integrity errors",
          Key.NVME_MEDIA_ERRORS_MAX, judge=SMART, requires=ON_SMART),
    _host("nvme_wear", S.NVME, "NVMe percentage of rated endurance used",
          Key.NVME_PERCENTAGE_USED_MAX, judge=SMART, requires=ON_SMART),
    # without the key, the drive's own warning temperature (id-ctrl WCTEMP) is the limit
    _host("nvme_temperature", S.NVME, "NVMe composite temperature", judge=SMART,
          fallback=(Key.NVME_TEMPERATURE_MAX_C,), requires=ON_SMART),
    _host("nvme_unsafe_shutdowns", S.NVME, "NVMe unsafe shutdowns gained since the last report",
          Key.NVME_UNSAFE_SHUTDOWNS_GROWTH_MAX, judge=SMART, requires=ON_SMART),
    _host("nvme_firmware", S.NVME, "NVMe firmware as pinned, else identical across one model",
          judge=SMART, requires=ON_SMART),
    _host("nvme_namespace_size", S.NVME, "NVMe namespace as large as expected", judge=SMART,
          requires=ON_SMART),
)
