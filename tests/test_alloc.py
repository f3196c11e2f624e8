"""toyrl.alloc: the glibc setting the credit benchmark applies."""
import platform

import pytest

from toyrl.alloc import keep_freed_memory


def test_keep_freed_memory_takes_on_glibc_and_checks_its_argument():
    took = keep_freed_memory(64)
    assert isinstance(took, bool)
    if platform.system() == "Linux" and platform.libc_ver()[0] == "glibc":
        assert took
    with pytest.raises(ValueError, match="mib"):
        keep_freed_memory(-1)
