"""TPU pods on CPU: meshes, plans, deviceless TPU compiles, and multi-process workers."""


def one_device_per_process(xla_flags: str) -> str:
    """`xla_flags` (the tests' XLA_FLAGS: fake devices, quick compiles) with one CPU device:
    a multi-process worker is one host of one device."""
    count = "--xla_force_host_platform_device_count"
    return " ".join([f for f in xla_flags.split() if not f.startswith(count)] + [f"{count}=1"])
