"""The contract suite: upstream's vendored mixins (upstream/) and the refresh and report scripts are not tests."""

collect_ignore = ["upstream", "refresh.py", "report.py"]


def pytest_configure(config):
    # the marks upstream's vendored mixins use (transformers registers them in its own conftest)
    for mark in ("accelerate_tests", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test", "torch_compile_test"):
        config.addinivalue_line("markers", f"{mark}: a mark of transformers' own test suite")
