"""Devices, hosts and TPU slices: meshes and sharding rules (`tpu.mesh`), several processes
under `jax.distributed` (`tpu.distributed`, `tpu.train`), compilation for real slices without a
TPU (`tpu.compile`), the memory planner (`tpu.plan`) and the gcloud TPU VM launch.
"""
