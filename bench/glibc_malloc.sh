# Sourced by the CPU benches: the glibc malloc settings that the cpu device's
# keep_freed_memory option makes in its process (plugins/devices/cpu/
# cpu_device.cc: the heap never trimmed, blocks up to 32 MiB from the heap),
# as environment assignments for a process that has no such option (plain
# PyTorch, a tree from before the option). Without them a CPU cell runs up
# to 2.7x slower or faster by its process's allocation history.
KEEP_FREED_MEMORY_ENV=(MALLOC_TRIM_THRESHOLD_=2147483647 MALLOC_MMAP_THRESHOLD_=33554432)
