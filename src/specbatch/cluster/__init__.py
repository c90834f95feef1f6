"""Running a job's shard on a cluster scheduler other than Slurm: Ray (launcher=ray).

The rows flow through Ray Data to engine replicas (``ray_replica``, one of the job's own engines each); the driver
(``ray_generation``) keeps the run folder's bookkeeping as a local launch does, writing each chunk's Parquet part
as its result comes back. ``ray_manifest`` prints the same command as a KubeRay RayJob.
"""
