"""GPU schedule templates (issue 54; Woodpecker-DL §2.2 on GPUs): Halide kernels for the `cuda`
target, built here to PTX (Halide's NVPTX backend needs no GPU) and run on the device.

Every template offers, as the CPU templates do, `KIND`, `supports(task)`, `space(task,
device)`, `views(task)` and `define(hl, task, config, mapping)` (its kernel takes the task's
arguments as `random_inputs` orders them) — the
algorithm and its loop structure, with the GPU-specific directives made through a `Mapping`
(mapping.py): `CudaMapping` emits gpu_blocks/gpu_threads/shared memory, `HostMapping` runs
the very same splits, tiles and tails serially on this CPU, so every template and config is
checked against the reference here, without a device. build.py turns a definition into a
cached GPU object (`build_gpu`) or a host kernel (`build_host`)."""
