"""The load level's storage checks, declared once (``nodegate.judge.declare``): the NVMe
array under fio (``nodegate.judge.storage:judge_fio``, one result per workload) and DCGM's
diagnostic where installed (``nodegate.judge.dcgm:judge_diag``, per test and GPU)."""

from __future__ import annotations

from nodegate.judge.declare import Check, check
from nodegate.profiles.threshold_keys import Feature, Key
from nodegate.vocabulary import Group, Level, Subject

FIO = "nodegate.judge.storage:judge_fio"


def _fio(name: str, meaning: str, key: Key) -> Check:
    # without the key: the drive's datasheet figure x drives x nvme.fio.efficiency
    return check(name, meaning, FIO, subject=Subject.STORAGE, group=Group.LOAD,
                 level=Level.STANDARD, fallback=(key,), requires=(Feature.NVME_FIO,))


CHECKS: tuple[Check, ...] = (
    _fio("nvme_seq_read", "array sequential read (fio, direct I/O)", Key.FIO_SEQ_READ_GBPS_MIN),
    _fio("nvme_seq_write", "array sequential write (fio, direct I/O)",
         Key.FIO_SEQ_WRITE_GBPS_MIN),
    _fio("nvme_rand_read", "array random 4 KiB read (fio)", Key.FIO_RAND_READ_KIOPS_MIN),
    check("dcgm_diag", "DCGM diagnostic (dcgmi diag -r <profile level>), per test and GPU",
          "nodegate.judge.dcgm:judge_diag", subject=Subject.STORAGE, group=Group.LOAD,
          level=Level.STANDARD),
)
