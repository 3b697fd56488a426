#!/usr/bin/env python3
"""The disk alone under the store's mix of writes, to tell the disk's own
stalls from the store's.

    scripts/disk-stall-probe.py DIR GIB SECONDS SYNCS_PER_S FILES_PER_S

- 1 MiB O_DIRECT overwrites, one at a time, cycling over a GIB GiB file
  written once first (as appends to a recycled CommitLog segment);
- if SYNCS_PER_S > 0, a thread writing 128 KiB buffered and fdatasyncing,
  that many times a second, on a preallocated 6 MB file (as the
  ConsumeQueue write-behind);
- if FILES_PER_S > 0, a thread creating, writing, fdatasyncing and (four
  files later) unlinking 6 MB files that many times a second (ConsumeQueue
  files made and removed; on a `discard` mount each unlink discards).

Prints the throughput and the five slowest O_DIRECT writes (ms, and
seconds into the run), and the slowest write+fdatasync. Files go in DIR
and are removed at the end.
"""
import mmap
import os
import sys
import threading
import time

MIB = 1 << 20


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    directory = sys.argv[1]
    size = int(sys.argv[2]) << 30
    seconds = float(sys.argv[3])
    syncs_per_s = float(sys.argv[4])
    files_per_s = float(sys.argv[5])
    path = os.path.join(directory, "disk-stall-probe.tmp")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT)
    buf = mmap.mmap(-1, MIB)  # page-aligned, as O_DIRECT needs
    buf.write(b"x" * MIB)
    for offset in range(0, size, MIB):
        os.pwrite(fd, buf, offset)
    os.fdatasync(fd)

    stop = threading.Event()
    sync_latencies = []

    def syncer():
        small = os.open(path + ".cq", os.O_RDWR | os.O_CREAT)
        os.posix_fallocate(small, 0, 6 * MIB)
        os.fsync(small)
        chunk = b"y" * (128 << 10)
        offset, next_at = 0, time.monotonic()
        while not stop.is_set():
            start = time.monotonic()
            os.pwrite(small, chunk, offset)
            os.fdatasync(small)
            sync_latencies.append(time.monotonic() - start)
            offset = (offset + len(chunk)) % (6 * MIB)
            next_at += 1.0 / syncs_per_s
            time.sleep(max(0.0, next_at - time.monotonic()))
        os.close(small)
        os.unlink(path + ".cq")

    def churner():
        churn_dir = path + ".files"
        os.makedirs(churn_dir, exist_ok=True)
        data = b"z" * (6 * MIB)
        made = 0
        while not stop.is_set():
            f = os.open(os.path.join(churn_dir, str(made)), os.O_RDWR | os.O_CREAT)
            os.pwrite(f, data, 0)
            os.fdatasync(f)
            os.close(f)
            if made >= 4:
                os.unlink(os.path.join(churn_dir, str(made - 4)))
            made += 1
            time.sleep(1.0 / files_per_s)
        for n in range(max(0, made - 4), made):
            os.unlink(os.path.join(churn_dir, str(n)))
        os.rmdir(churn_dir)

    threads = []
    if syncs_per_s > 0:
        threads.append(threading.Thread(target=syncer))
    if files_per_s > 0:
        threads.append(threading.Thread(target=churner))
    for t in threads:
        t.start()
    latencies, offset, begin, writes = [], 0, time.monotonic(), 0
    while time.monotonic() - begin < seconds:
        start = time.monotonic()
        os.pwrite(fd, buf, offset)
        latencies.append((time.monotonic() - start, start - begin))
        writes += 1
        offset = (offset + MIB) % size
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - begin
    latencies.sort(reverse=True)
    slowest = [(round(l * 1000, 1), round(at, 1)) for l, at in latencies[:5]]
    worst_sync = max(sync_latencies) * 1000 if sync_latencies else 0.0
    print(f"direct_mb_per_s={writes / elapsed:.0f} syncs_per_s={len(sync_latencies) / elapsed:.0f} "
          f"slowest_writes_ms_at_s={slowest} slowest_sync_ms={worst_sync:.1f}")
    os.close(fd)
    os.unlink(path)


if __name__ == "__main__":
    main()
