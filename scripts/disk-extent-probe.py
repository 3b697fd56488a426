#!/usr/bin/env python3
"""The disk alone, appending with O_DIRECT into files prepared four ways.

    scripts/disk-extent-probe.py --dir DIR [--mib 512] [--chunk-kib 256] [--sync] [--rounds 2]
                                 [--modes written,zeroed,unwritten,extending]

Each mode writes one file of --mib MiB front to back in --chunk-kib writes (one in flight,
fdatasync after each with --sync), then unlinks it:

- written: the file was zero-filled and fsynced first, so the writes land on written extents
  whose blocks the device already holds (what storage-bench's floors measure, and what a
  recycled CommitLog segment is).
- zeroed: zero-filled like `written`, then FALLOC_FL_ZERO_RANGE over the whole file: ext4 turns
  the extents back into unwritten ones on the same blocks, so the writes pay ext4's extent
  conversion but land on blocks the device holds.
- unwritten: posix_fallocate on a new file: unwritten extents on blocks the file system just
  allocated (on a `discard` mount, blocks the device was told were free), what a growing
  CommitLog's new segments are.
- extending: no preallocation; each write extends the file (ext4 allocates written extents).

Prints one line per mode and round: mode, MB/s, and the p50, p99 and max of one write (with its
fdatasync under --sync). Rounds alternate the modes, since this kind of disk drifts.
"""
import argparse
import ctypes
import mmap
import os
import sys
import time

FALLOC_FL_ZERO_RANGE = 0x10
MODES = ("written", "zeroed", "unwritten", "extending")


def zero_fill(fd, size):
    zeros = mmap.mmap(-1, 1 << 20)
    for offset in range(0, size, 1 << 20):
        os.pwrite(fd, zeros, offset)
    os.fsync(fd)


def prepare(fd, mode, size):
    if mode in ("written", "zeroed"):
        zero_fill(fd, size)
    if mode == "zeroed":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long)
        if libc.fallocate(fd, FALLOC_FL_ZERO_RANGE, 0, size) != 0:
            err = ctypes.get_errno()
            sys.exit(f"disk-extent-probe: FALLOC_FL_ZERO_RANGE failed: {os.strerror(err)}")
        os.fsync(fd)
    elif mode == "unwritten":
        os.posix_fallocate(fd, 0, size)
        os.fsync(fd)


def run(directory, mode, size, chunk, sync):
    path = os.path.join(directory, f"disk-extent-probe.{mode}")
    if os.path.exists(path):
        os.unlink(path)
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o644)
    try:
        prepare(fd, mode, size)
        data = mmap.mmap(-1, chunk)
        data.write(b"r" * chunk)
        latencies = []
        start = time.perf_counter()
        for offset in range(0, size, chunk):
            t0 = time.perf_counter()
            os.pwrite(fd, data, offset)
            if sync:
                os.fdatasync(fd)
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1e6
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1e6
    return size / elapsed / 1e6, p50, p99, latencies[-1] * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", required=True)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--chunk-kib", type=int, default=256)
    parser.add_argument("--sync", action="store_true", help="fdatasync after every write")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    for mode in modes:
        if mode not in MODES:
            sys.exit(f"disk-extent-probe: unknown mode {mode!r} (one of {', '.join(MODES)})")
    if args.mib <= 0 or args.chunk_kib <= 0 or args.chunk_kib % 4 or args.rounds <= 0:
        sys.exit("disk-extent-probe: --mib, --rounds must be positive, --chunk-kib a positive multiple of 4")
    size = args.mib << 20
    chunk = args.chunk_kib << 10
    if size % chunk:
        sys.exit("disk-extent-probe: --mib must be a whole number of chunks")
    print(f"# {args.mib} MiB per file in {args.chunk_kib} KiB O_DIRECT writes, one in flight, "
          f"{'fdatasync after each' if args.sync else 'no fdatasync'}; {args.dir}")
    for round_index in range(args.rounds):
        for mode in modes:
            mb_per_s, p50, p99, worst = run(args.dir, mode, size, chunk, args.sync)
            print(f"round={round_index + 1} mode={mode} mb_per_s={mb_per_s:.0f} p50_us={p50:.0f} "
                  f"p99_us={p99:.0f} max_us={worst:.0f}", flush=True)


if __name__ == "__main__":
    main()
