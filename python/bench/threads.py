"""Thread scaling of the blocking client (issue 16): N threads each loop
acquire -> release on fresh names with the public sync API for a few
seconds; prints cycles/s and CPU per cycle for each N.

    .venv/bin/python bench/threads.py                      # N = 1, 2, 4, 16
    .venv/bin/python bench/threads.py --compare /tmp/old --rounds 5 [--bare]
    .venv/bin/python bench/threads.py --threads 16 --profile cprofile

Without --server it starts ``monolock serve`` ($MONOLOCK_BIN, else
../bin/monolock from ``go run mage.go build``) on a free loopback port with a
data directory of its own (on /dev/shm when there is one), and reports the
server's CPU per cycle too.
``--src DIR`` imports ``monolock`` from DIR instead of this checkout (a copy
of an older package); ``--compare DIR`` alternates rounds of this checkout
and of DIR against one server, so that both see the same machine, and
prints the median of each; with ``--bare`` a third side runs the same
cycles on plain sockets without the client, the ceiling any Python client
could reach on this machine at that moment. ``--profile cprofile``
profiles every thread of the run (the client's own included);
``--profile pyinstrument`` samples the wall clock of one worker thread:
where a caller waits.

The target of issue 16: 16 threads at least 2x the 1-thread rate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent


def start_server() -> tuple[subprocess.Popen[str], str]:
    """Start ``monolock serve`` on a free port; returns it and its address."""
    binary = os.environ.get("MONOLOCK_BIN") or str(HERE.parent.parent / "bin" / "monolock")
    # On tmpfs when there is one: the server reserves fencing tokens with an
    # fsync per block, and a slow disk shared with other work would stall
    # grants and measure the disk instead of the client.
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    data_dir = tempfile.mkdtemp(prefix="monolock-bench-", dir=shm)
    ready = os.path.join(data_dir, "ready.json")
    args = ["serve", "--listen", "127.0.0.1:0", "--admin", "off", "--data-dir", data_dir]
    proc = subprocess.Popen(
        [binary, *args, "--ready-file", ready],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    # Keep draining its log so the server never blocks on a pipe.
    log: list[str] = []
    threading.Thread(target=lambda: log.extend(proc.stderr or []), daemon=True).start()
    # The server renames its ready file into place whole (docs/operating.md).
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(ready):
            with open(ready, encoding="utf-8") as f:
                return proc, str(json.load(f)["lock_addr"])
        time.sleep(0.02)
    proc.kill()
    raise SystemExit("monolock serve was not ready:\n" + "".join(log[-50:]))


def proc_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) of a process: this one when pid is None."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(
    addr: str,
    threads: int,
    seconds: float,
    tag: str,
    server_pid: int | None = None,
    bare: bool = False,
) -> tuple[float, int, float, float]:
    """One cell: cycles/s, failed workers, client and server CPU per cycle (µs)."""
    import monolock

    client = monolock.Client(addr, lease=10)

    def cycle(name: str) -> None:
        if bare:
            bare_cycle(addr, name)
            return
        with client.lock(name, timeout=10):
            pass

    counts = [0] * threads
    failures: list[BaseException] = []
    start = threading.Barrier(threads + 1)
    stop = threading.Event()

    def worker(i: int) -> None:
        start.wait()
        n = 0
        try:
            while not stop.is_set():
                cycle(f"bench/{tag}/{threads}/{i}/{n}")
                n += 1
        except BaseException as exc:  # report, do not hang the run
            failures.append(exc)
        counts[i] = n

    pool = [
        threading.Thread(target=worker, args=(i,), name=f"bench-{i}", daemon=True)
        for i in range(threads)
    ]
    for t in pool:
        t.start()
    start.wait()
    t0 = time.monotonic()
    c0 = proc_cpu(None)
    s0 = proc_cpu(server_pid) if server_pid else 0.0
    time.sleep(seconds)
    stop.set()
    for t in pool:
        t.join()
    elapsed = time.monotonic() - t0
    c1 = proc_cpu(None)
    s1 = proc_cpu(server_pid) if server_pid else 0.0
    if failures:
        print(f"  {len(failures)} worker(s) failed: {failures[0]!r}", file=sys.stderr)
    cycles = max(1, sum(counts))
    return cycles / elapsed, len(failures), (c1 - c0) / cycles * 1e6, (s1 - s0) / cycles * 1e6


def bare_cycle(addr: str, name: str) -> None:
    """One acquire -> release with plain sockets and no client library:
    connect, ACQUIRE, wait for ACQUIRED (after a WAITING when the server
    makes the grant wait), half-close, wait for the server's close. The
    least any Python client can do per cycle (``--bare``)."""
    import select
    import socket
    import struct

    host, port = addr.rsplit(":", 1)
    raw = name.encode()
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(struct.pack(">BBIH", 1, 1, 10_000, len(raw)) + raw)
        got = b""
        while b"\x12" not in got[-9:-8] and got[:1] != b"\x12":
            got += sock.recv(64)
            if not got:
                raise ConnectionError("server closed")
        sock.shutdown(socket.SHUT_WR)
        poller = select.poll()
        poller.register(sock, select.POLLIN)
        while poller.poll(1000) and sock.recv(64):
            pass


@contextlib.contextmanager
def threads_run_through(
    wrapper: Callable[[Callable[[threading.Thread], None]], Any],
) -> Iterator[None]:
    """Within the block, run every new thread's run() through
    ``wrapper(original_run)``."""
    original = threading.Thread.run
    threading.Thread.run = wrapper(original)  # type: ignore[method-assign]
    try:
        yield
    finally:
        threading.Thread.run = original  # type: ignore[method-assign]


def profiled(addr: str, n: int, seconds: float, tag: str, kind: str) -> float:
    """One cell under a profiler; prints the profile, returns cycles/s."""
    if kind == "cprofile":
        # Every thread of the run, the client's own threads included.
        import cProfile
        import pstats

        profiles: list[cProfile.Profile] = []

        def wrap_all(original: Callable[[threading.Thread], None]) -> Any:
            def profiled_run(self: threading.Thread) -> None:
                prof = cProfile.Profile()
                prof.enable()
                try:
                    original(self)
                finally:
                    prof.disable()
                    profiles.append(prof)

            return profiled_run

        with threads_run_through(wrap_all):
            rate = run(addr, n, seconds, tag)[0]
        print(f"== {n} threads: {rate:.0f} cycles/s under cProfile, all threads")
        pstats.Stats(*profiles).sort_stats("tottime").print_stats(25)
        return rate

    # Wall clock of worker 0: where a caller waits.
    from pyinstrument import Profiler

    holder: list[Profiler] = []

    def wrap_one(original: Callable[[threading.Thread], None]) -> Any:
        def sampled_run(self: threading.Thread) -> None:
            if self.name != "bench-0":
                original(self)
                return
            prof = Profiler(interval=0.0002, async_mode="disabled")
            prof.start()
            try:
                original(self)
            finally:
                prof.stop()
                holder.append(prof)

        return sampled_run

    with threads_run_through(wrap_one):
        rate = run(addr, n, seconds, tag)[0]
    print(f"== {n} threads: {rate:.0f} cycles/s under pyinstrument (worker 0)")
    print(holder[0].output_text(unicode=False, color=False, show_all=False))
    return rate


def compare(args: argparse.Namespace, addr: str) -> None:
    """Alternate rounds of this checkout and of args.compare; print medians."""
    sides: dict[str, str | None] = {"new": None, "old": args.compare}
    if args.bare:
        sides["bare"] = "--bare"
    rates: dict[tuple[str, int], list[float]] = {}
    cpus: dict[tuple[str, int], list[float]] = {}
    for round_no in range(args.rounds):
        for label, src in sides.items() if round_no % 2 == 0 else reversed(sides.items()):
            cmd = [sys.executable, __file__, "--server", addr, "--seconds", str(args.seconds)]
            cmd += ["--threads", args.threads, "--label", label, "--quiet"]
            if src == "--bare":
                cmd.append(src)
            elif src:
                cmd += ["--src", src]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            for line in out.splitlines():
                n, rate, cpu_us = line.split()
                rates.setdefault((label, int(n)), []).append(float(rate))
                cpus.setdefault((label, int(n)), []).append(float(cpu_us))
                print(
                    f"round {round_no + 1} {label}: {int(n):3d} threads {float(rate):7.0f}/s"
                    f"  client CPU {float(cpu_us):4.0f} µs/cycle"
                )
    print(f"medians over {args.rounds} rounds:")
    for label in sides:
        row = {n: statistics.median(v) for (lab, n), v in rates.items() if lab == label}
        cpu = {n: statistics.median(v) for (lab, n), v in cpus.items() if lab == label}
        text = "  ".join(
            f"{n} threads {r:6.0f}/s ({cpu[n]:.0f} µs CPU)" for n, r in sorted(row.items())
        )
        ratio = f"  16/1 = {row[16] / row[1]:.2f}x" if 1 in row and 16 in row else ""
        print(f"  {label}: {text}{ratio}")


def main() -> int:
    """Run the cells (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--server", help="address of a running monolock serve")
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each cell")
    ap.add_argument("--threads", default="1,2,4,16", help="thread counts, comma-separated")
    ap.add_argument("--profile", choices=["cprofile", "pyinstrument"])
    ap.add_argument("--src", help="import monolock from this directory")
    ap.add_argument("--compare", metavar="DIR", help="alternate with monolock from DIR")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each side (--compare)")
    ap.add_argument("--label", default="")
    ap.add_argument("--quiet", action="store_true", help="print only 'N rate cpu' lines")
    ap.add_argument(
        "--bare",
        action="store_true",
        help="plain sockets instead of the client (with --compare: a third side)",
    )
    args = ap.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    import monolock

    proc = None
    addr = args.server
    if addr is None:
        proc, addr = start_server()
    server_pid = proc.pid if proc is not None else None
    tag = f"{os.getpid()}-{time.monotonic_ns()}"
    label = args.label or ("bare sockets" if args.bare else str(Path(monolock.__file__).parent))
    try:
        if args.compare:
            compare(args, addr)
            return 0
        rates = {}
        for n in (int(x) for x in args.threads.split(",")):
            if args.profile:
                rates[n] = profiled(addr, n, args.seconds, tag, args.profile)
                continue
            bare = args.bare and not args.compare
            rate, _, client_cpu, server_cpu = run(addr, n, args.seconds, tag, server_pid, bare)
            rates[n] = rate
            if args.quiet:
                print(n, round(rate), round(client_cpu), flush=True)
                continue
            extra = f"  client CPU {client_cpu:4.0f} µs/cycle"
            if server_pid:
                extra += f", server CPU {server_cpu:4.0f} µs/cycle"
            print(f"{label}: {n:3d} threads {rate:8.0f} cycles/s{extra}", flush=True)
        if 1 in rates and 16 in rates and not args.quiet:
            print(f"{label}: 16 threads / 1 thread = {rates[16] / rates[1]:.2f}x")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
