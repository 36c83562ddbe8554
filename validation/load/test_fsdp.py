"""Battery: load group. FSDP training steps, sharded checkpoints and their verified reload."""

import pytest

from nodegate.results import CheckResult
from nodegate.testing.asserts import assert_verdicts


@pytest.mark.check("fsdp_completed")
def test_fsdp_completed(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("fsdp_loss")
def test_fsdp_loss(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("fsdp_straggler")
def test_fsdp_straggler(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("fsdp_tokens_per_s")
def test_fsdp_tokens_per_s(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("fsdp_tflops")
def test_fsdp_tflops(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("fsdp_checkpoint_write")
def test_fsdp_checkpoint_write(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("fsdp_checkpoint_read")
def test_fsdp_checkpoint_read(results: list[CheckResult]) -> None:
    assert_verdicts(results)


@pytest.mark.check("fsdp_checkpoint_verify")
def test_fsdp_checkpoint_verify(results: list[CheckResult]) -> None:
    assert_verdicts(results)
