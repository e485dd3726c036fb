"""flexrt keeps freed memory in glibc's heap (``flexrt._keep_freed_memory``) unless told not to."""

import platform
import subprocess
import sys

import pytest

import flexrt


def _tuned(env_value):
    env = {"PATH": "/usr/bin:/bin"} | ({"FLEXRT_MALLOC": env_value} if env_value is not None else {})
    out = subprocess.run([sys.executable, "-c", "import flexrt; print(flexrt.MALLOC_TUNED)"], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_keeps_freed_memory_unless_told_not_to():
    assert flexrt.MALLOC_TUNED is True
    assert _tuned(None) == "True"
    assert _tuned("default") == "False"
