"""ns-3 as a reference simulator: build and run the TCP dumbbell of ``sims/ns3/dumbbell.cc``.

The program is compiled once per source version (``g++ -O2`` with the flags of ns-3's pkg-config
modules) into ``build/ns3/dumbbell-<hash>/dumbbell`` (``$CCJAX_NS3_BUILD_DIR`` overrides the
folder; outside a source checkout the default is ``~/.cache/ccjax/ns3``). Builds are safe from
parallel processes: one compiles under a file lock to a temporary file that is renamed into place,
the others wait and reuse it. ns-3 itself comes from the system (Debian/Ubuntu:
``apt-get install libns3-dev libgsl-dev``, ns-3.37); without it ``build`` raises a one-line
``ConfigError`` and ``available()`` is False.

A machine without ns-3's packages (a GPU node where one cannot install them) runs a program
built elsewhere: ``bundle(DIR)`` (``ccjax ns3-bundle DIR``) copies the built program with every
shared library it loads, the C library and its loader included, into ``DIR``, and
``$CCJAX_NS3_PROGRAM=DIR/dumbbell`` makes ``build`` return that program instead of compiling
(``available()`` is then True). The bundle records the SHA-256 of the ``dumbbell.cc`` it was
built from and the machine type, and ``build`` refuses it once the source has changed, on
another machine type, or without that record (a program compiled by hand against another ns-3
needs the record written beside it: the source's SHA-256 and ``uname -m``, one per line).

``run_dumbbell`` runs one dumbbell (N senders with their own fast access links, one drop-tail
bottleneck, N receivers) and returns the program's JSON object:

* ``flows[i]``: ``throughput_mbps`` (IP bytes of the flow that crossed the bottleneck, per second
  the flow was active inside the measurement window; 1500 bytes per full segment, the 2-byte PPP
  header is not counted and costs no capacity), ``goodput_mbps`` (payload bytes the receiving
  application got), ``send_rate_mbps``, ``mean_rtt_ms`` / ``min_rtt_ms`` / ``p95_rtt_ms`` (one
  sample per data segment: sent -> first ACK or SACK that covers it, Karn's rule), ``loss_rate``
  ((drop-tail drops + random losses) / data packets offered to the bottleneck),
  ``base_rtt_ms`` (propagation only), counters (among them ``timeouts``, the retransmission
  timeouts, and ``recoveries``, the fast-retransmit loss episodes), ``throughput_series_mbps`` and
  ``cwnd_series_pkts`` (per ``interval_s``, over the whole run);
* ``link``: ``utilization`` (IP bytes the bottleneck transmitted / (capacity x measured time)),
  ``mean_queue_delay_ms`` (enqueue -> dequeue, i.e. waiting time without the packet's own
  transmission time, averaged over the packets dequeued), ``max_queue_delay_ms``, ``drop_rate``,
  ``utilization_series``, ``queue_series_pkts`` (time-averaged), ``other_drops`` (drops anywhere
  else; always 0 unless something is wrong);
* ``config`` (what ran) and ``sim`` (``simulator``, ``wall_s``, ``run_wall_s``, ``events``, and
  ``argv``, the command line).

``sims/ns3/README.md`` describes the model and its choices in full.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from ccjax.dirlock import nearest_folder
from ccjax.errors import ConfigError, require

#: pkg-config modules the program links against
NS3_MODULES = ("ns3-core", "ns3-network", "ns3-internet", "ns3-point-to-point",
               "ns3-applications", "ns3-traffic-control")
INSTALL_HINT = "install with `apt-get install libns3-dev libgsl-dev`"
#: environment variable naming a prebuilt dumbbell program (``bundle``) to run instead of building
PROGRAM_ENV = "CCJAX_NS3_PROGRAM"
#: the file beside a bundled program that holds the SHA-256 of the source it was built from
SOURCE_HASH_FILE = "dumbbell.source-sha256"
#: ccjax controller name -> ns-3 TypeId (without ``ns3::``)
CC_TYPES = {"newreno": "TcpNewReno", "cubic": "TcpCubic", "vegas": "TcpVegas", "bbr": "TcpBbr"}
#: the program rejects more
MAX_FLOWS = 4000

_PKG = Path(__file__).resolve().parent
_SOURCES = (_PKG.parent / "sims" / "ns3" / "dumbbell.cc",  # source checkout
            _PKG / "_presets" / "sims" / "ns3" / "dumbbell.cc")  # installed wheel


def source_path() -> Path:
    """The dumbbell's C++ source."""
    for p in _SOURCES:
        if p.is_file():
            return p
    raise ConfigError(f"ns3 source={str(_SOURCES[0])!r} is invalid: the file is missing")


def build_root() -> Path:
    """Folder that holds the compiled programs."""
    env = os.environ.get("CCJAX_NS3_BUILD_DIR")
    if env:
        return Path(env)
    checkout = _PKG.parent
    if (checkout / "pyproject.toml").is_file() and (checkout / "sims").is_dir():
        return checkout / "build" / "ns3"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "ccjax" / "ns3"


def _compiler() -> str:
    cxx = os.environ.get("CXX", "g++")
    path = shutil.which(cxx)
    if path is None:
        raise ConfigError(f"C++ compiler={cxx!r} is invalid: not found; ns-3 programs need g++ "
                          f"(apt-get install g++) and ns-3 ({INSTALL_HINT})")
    return path


@lru_cache(maxsize=1)
def _ns3_flags() -> tuple[str, ...]:
    """Compiler and linker flags of the ns-3 modules (raises ``ConfigError`` without ns-3)."""
    missing = ConfigError(f"ns-3 is not installed (no pkg-config modules {', '.join(NS3_MODULES)}"
                          f"): {INSTALL_HINT}, or run a bundle made where it is (`ccjax "
                          f"ns3-bundle DIR`) with {PROGRAM_ENV}=DIR/dumbbell")
    if shutil.which("pkg-config") is None:
        raise missing
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", *NS3_MODULES],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        raise missing from None
    if out.returncode != 0:
        raise missing
    flags = []
    for tok in shlex.split(out.stdout):
        # Debian's ns3 .pc files carry a stray "-I/usr;"; drop include dirs that do not exist
        if tok.startswith("-I") and not Path(tok[2:]).is_dir():
            continue
        flags.append(tok)
    include_dirs = [Path(t[2:]) for t in flags if t.startswith("-I")] + [Path("/usr/include"),
                                                                          Path("/usr/local/include")]
    if not any((d / "ns3" / "core-module.h").is_file() for d in include_dirs):
        raise missing
    return tuple(flags)


@lru_cache(maxsize=1)
def _ns3_versions() -> str:
    """The installed ns-3 modules' versions (``pkg-config --modversion``): part of the build
    cache's key, as the link flags name no version (``-lns3-core``) while the program is bound to
    one (``libns3-core.so.37``), so an upgrade must not reuse the old program."""
    _ns3_flags()  # a missing ns-3 is its one-line error
    out = subprocess.run(["pkg-config", "--modversion", *NS3_MODULES], capture_output=True,
                         text=True, timeout=30)
    return out.stdout.strip().replace("\n", ",")


#: how long a compile of the dumbbell, and by default one run of it, may take (s): far past
#: what they take (about a minute to compile; seconds to run a 30 s dumbbell at 50 Mbps)
COMPILE_TIMEOUT_S = 1800
RUN_TIMEOUT_S = 3600.0


def _compile_command(src: Path, out: Path) -> list[str]:
    return [_compiler(), "-O2", "-std=c++17", "-o", str(out), str(src), *_ns3_flags()]


def available() -> bool:
    """Whether the dumbbell can run here: ns-3 and a C++ compiler are installed, or
    ``$CCJAX_NS3_PROGRAM`` names a usable prebuilt program (nothing is compiled)."""
    try:
        if os.environ.get(PROGRAM_ENV):
            _prebuilt()
        else:
            _compiler()
            _ns3_flags()
            source_path()
    except ConfigError:
        return False
    return True


def source_sha256() -> str:
    """SHA-256 (hex) of the dumbbell's C++ source."""
    return hashlib.sha256(source_path().read_bytes()).hexdigest()


def _prebuilt() -> Path:
    """The program ``$CCJAX_NS3_PROGRAM`` names, as an absolute path with links resolved (a
    relative name would be looked up on ``PATH`` by ``subprocess``), checked against the record
    beside it: the source it was built from and the machine type (``ConfigError`` if unusable).
    """
    given = os.environ[PROGRAM_ENV]
    path = Path(given).expanduser().resolve()
    if not path.is_file() or not os.access(path, os.X_OK):
        raise ConfigError(f"{PROGRAM_ENV}={given!r} is invalid: not an executable file; "
                          f"name a program made by `ccjax ns3-bundle`, or unset it to build "
                          f"with ns-3 ({INSTALL_HINT})")
    record = path.parent / SOURCE_HASH_FILE
    if not record.is_file():
        raise ConfigError(f"{PROGRAM_ENV}={given!r} is invalid: no {SOURCE_HASH_FILE} beside "
                          f"it, so nothing says which {source_path().name} it runs; allowed: a "
                          f"program made by `ccjax ns3-bundle`, or one compiled from this "
                          f"source with its SHA-256 (`sha256sum {source_path().name}`) and "
                          f"the machine type (`uname -m`) written there, one per line")
    built, machine = ([*record.read_text().split(), "", ""])[:2]
    now = source_sha256()
    if built != now:
        raise ConfigError(f"{PROGRAM_ENV}={given!r} is invalid: it was built from another "
                          f"{source_path().name} (SHA-256 {built[:12]}, this one {now[:12]}); "
                          f"bundle it again with `ccjax ns3-bundle`")
    if machine != platform.machine():
        raise ConfigError(f"{PROGRAM_ENV}={given!r} is invalid: it was built for "
                          f"{machine or 'an unrecorded machine type'}, this machine is "
                          f"{platform.machine()}; bundle it on a {platform.machine()} machine")
    return path


def binary_path() -> Path:
    """Where ``build()`` puts the program it compiles for the current source and flags (not
    consulted while ``$CCJAX_NS3_PROGRAM`` names a prebuilt one)."""
    src = source_path()
    h = hashlib.sha256(src.read_bytes())
    h.update("\0".join(_compile_command(Path("SRC"), Path("OUT"))).encode())
    h.update(f"\0ns-3 {_ns3_versions()}".encode())
    return build_root() / f"dumbbell-{h.hexdigest()[:16]}" / "dumbbell"


def build(force: bool = False) -> Path:
    """Compile ``sims/ns3/dumbbell.cc`` (once per source version) and return the program's path.

    Raises ``ConfigError`` (one line, with the install command) when ns-3 or g++ is missing,
    ``RuntimeError`` when the compiler fails otherwise.
    """
    if os.environ.get(PROGRAM_ENV):
        if force:
            raise ConfigError(f"force=True is invalid while {PROGRAM_ENV} is set: a prebuilt "
                              f"program is not rebuilt; unset it to compile")
        return _prebuilt()
    out = binary_path()
    if out.is_file() and os.access(out, os.X_OK) and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be compiling the same thing
        if out.is_file() and os.access(out, os.X_OK) and not force:
            return out
        fd, tmp = tempfile.mkstemp(prefix=".dumbbell-", dir=out.parent)
        os.close(fd)
        try:
            cmd = _compile_command(source_path(), Path(tmp))
            try:
                res = subprocess.run(cmd, capture_output=True, text=True,
                                     timeout=COMPILE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"compiling the ns-3 dumbbell ran past {COMPILE_TIMEOUT_S} s"
                                   ) from None
            if res.returncode != 0:
                err = res.stderr.strip()
                if "ns3/" in err and "No such file" in err:
                    raise ConfigError(f"ns-3 headers are missing: {INSTALL_HINT}")
                if "cannot find -lns3" in err:
                    raise ConfigError(f"ns-3 libraries are missing: {INSTALL_HINT}")
                tail = " | ".join(err.splitlines()[-5:])
                raise RuntimeError(f"compiling {source_path()} failed: {tail}")
            os.chmod(tmp, 0o755)
            os.replace(tmp, out)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return out


#: the wrapper ``bundle`` writes: the bundled loader runs the program against the bundled
#: libraries only, so neither the host's ns-3 nor its C library version matters
_WRAPPER = """#!/bin/sh
# ns-3 dumbbell of ccjax with its shared libraries (ccjax.ns3.bundle); run it as the program.
# Host preloads (profilers, XALT) are built for the host's C library, not the bundled one.
unset LD_PRELOAD LD_AUDIT LD_LIBRARY_PATH
p=$(readlink -f -- "$0")
d=$(CDPATH= cd -P -- "$(dirname -- "$p")" && pwd -P)
exec "$d/lib/{loader}" --inhibit-cache --library-path "$d/lib" "$d/dumbbell.bin" "$@"
"""

#: one line of ``ldd``: "name => /path (0x...)", "name => not found", "/loader (0x...)",
#: "/loader => /real/loader (0x...)" (Arch, Fedora), "linux-vdso.so.1 (0x...)"
_LDD_LINE = re.compile(r"^\s*(\S+)(?:\s+=>\s+(.*?))?\s*(?:\(0x[0-9a-fA-F]+\))?\s*$")


def parse_ldd(text: str, program: str = "the program") -> list[tuple[Path, str]]:
    """The files ``program`` loads, from ``ldd``'s output, as (file, the name it is loaded by),
    the ELF loader first; a one-line ``ConfigError`` where a library is not found or no loader
    is named (a static program needs no bundle)."""
    loader, libs = None, []
    for line in text.splitlines():
        m = _LDD_LINE.match(line)
        if m is None or not line.strip():
            continue
        name, target = m.group(1), (m.group(2) or "").strip()
        if target == "not found":
            raise ConfigError(f"ns-3 program {program} is invalid to bundle: ldd finds no "
                              f"{name}; allowed: a program whose every library resolves here")
        if name.startswith("/"):  # the ELF interpreter, e.g. /lib64/ld-linux-x86-64.so.2
            loader = (Path(target if target.startswith("/") else name), Path(name).name)
        elif target.startswith("/"):
            libs.append((Path(target), name))
    if loader is None:
        raise ConfigError(f"ns-3 program {program} is invalid to bundle: ldd names no ELF "
                          f"loader; allowed: a dynamically linked program")
    return [loader, *libs]


def _shared_libraries(program: Path) -> list[tuple[Path, str]]:
    """``parse_ldd`` of ``ldd program``."""
    if shutil.which("ldd") is None:
        raise ConfigError("ldd is missing: bundling the ns-3 program needs it (glibc's ldd, "
                          "package libc-bin)")
    try:
        res = subprocess.run(["ldd", str(program)], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        raise ConfigError(f"ldd {program} could not run: {e}") from None
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise ConfigError(f"ldd {program} failed: {last}")
    return parse_ldd(res.stdout, str(program))


def bundle(dest: str | Path) -> Path:
    """Copy the built dumbbell with every shared library it loads into ``dest`` (new or empty)
    and return the program to run there, ``dest/dumbbell`` (absolute): on another Linux machine
    of the same machine type without ns-3, ``CCJAX_NS3_PROGRAM=dest/dumbbell`` runs the same
    simulation.

    Builds the program first (``build``; needs ns-3 here). The bundle is assembled in a
    temporary folder beside ``dest`` and renamed into place, so a failure leaves nothing
    behind. Raises ``ConfigError`` when ``dest`` holds files, ns-3 is missing or a library does
    not resolve.
    """
    dest = Path(dest).expanduser().resolve()
    require(not dest.exists() or (dest.is_dir() and not any(dest.iterdir())), "dest",
            str(dest), "a folder that does not exist yet or is empty")
    up, writable = nearest_folder(dest)
    require(writable, "dest", str(dest), f"a folder that can be made: {up} is not a writable "
            "folder")
    if os.environ.get(PROGRAM_ENV):
        raise ConfigError(f"{PROGRAM_ENV} is set: unset it to bundle the program built from "
                          f"{source_path()}")
    program = build()
    files = _shared_libraries(program)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        (tmp / "lib").mkdir()
        for src, name in files:
            shutil.copy2(src.resolve(), tmp / "lib" / name)  # the file, under its soname
        shutil.copy2(program, tmp / "dumbbell.bin")
        (tmp / SOURCE_HASH_FILE).write_text(f"{source_sha256()}\n{platform.machine()}\n")
        (tmp / "dumbbell").write_text(_WRAPPER.format(loader=files[0][1]))
        (tmp / "dumbbell").chmod(0o755)
        tmp.chmod(0o755)
        if dest.exists():
            dest.rmdir()  # empty, checked above
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest / "dumbbell"


# ------------------------------------------------------------------------------------------------
# running


def _per_flow(value: Any, n: int, field: str) -> list[Any]:
    v = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]
    require(len(v) in (1, n), field, value, f"one value or one per flow ({n} flows)")
    return v * n if len(v) == 1 else v


def _num(x: float) -> str:
    return repr(float(x))  # shortest text that reads back as the same double


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def cc_type(name: str) -> str:
    """ns-3 TypeId name (``TcpCubic``) of a ccjax controller name (``cubic``); ns-3 names pass."""
    key = name.strip()
    if key.lower() in CC_TYPES:
        return CC_TYPES[key.lower()]
    if key in CC_TYPES.values():
        return key
    raise ConfigError(f"cc={name!r} is invalid: one of {', '.join(CC_TYPES)} "
                      f"(or {', '.join(CC_TYPES.values())})")


#: ns-3 TcpCubic's HybridSSDetectionMode values (tcp-cubic.h)
HYSTART_DETECT = {"packet_train": 1, "delay": 2, "both": 3}


def run_dumbbell(
    flows: int,
    bw_mbps: float,
    rtt_ms: float | Sequence[float],
    buffer_pkts: int | None,
    loss: float,
    cc: str | Sequence[str],
    duration_s: float,
    start_s: float | Sequence[float] | None = None,
    seed: int = 0,
    interval_s: float = 0.1,
    warmup_s: float = 0.0,
    *,
    stop_s: float | Sequence[float] | None = None,
    loss_at: str = "ingress",
    jitter_us: float | None = None,
    btl_delay_ms: float | None = None,
    recovery: str = "prr",
    timestamps: bool = True,
    timeout_s: float | None = None,
    hystart_detect: str = "both",
    hystart: bool = True,
) -> dict[str, Any]:
    """Run the ns-3 dumbbell and return its JSON summary (see the module docstring).

    ``rtt_ms``, ``start_s``, ``stop_s`` and ``cc`` take one value or one per flow; ``cc`` is a
    ccjax name (``newreno``, ``cubic``, ``vegas``, ``bbr``) or an ns-3 one (``TcpCubic``).
    ``buffer_pkts`` is the bottleneck's drop-tail buffer in packets (``None``: one BDP of the
    largest RTT). ``loss`` is the probability that a data segment is lost at random, before the
    bottleneck queue (``loss_at="ingress"``, as ccjax applies it) or after the link
    (``"egress"``). Measurement covers ``[warmup_s, duration_s]``; series cover the whole run.
    ``jitter_us`` is the senders' per-packet random delay (uniform, order-preserving; ``None``:
    one bottleneck packet time, ``0``: none; it breaks drop-tail phase effects),
    ``btl_delay_ms`` the bottleneck's one-way delay (``None``: min RTT / 4), ``recovery``
    ``"prr"`` (ns-3's default) or ``"classic"`` (RFC 6582 NewReno / RFC 6675 without PRR),
    ``hystart_detect`` TcpCubic's HyStart tests: ``"both"`` (ns-3's default), ``"delay"`` or
    ``"packet_train"``, and ``hystart=False`` turns HyStart off. ``timeout_s`` bounds the run's
    wall time (``None``: ``RUN_TIMEOUT_S``, an hour).
    Raises ``ConfigError`` on invalid input (before building) and ``RuntimeError`` if ns-3 fails
    or runs past the timeout.
    """
    require(isinstance(flows, int) and not isinstance(flows, bool) and 1 <= flows <= MAX_FLOWS,
            "flows", flows, f"an integer from 1 to {MAX_FLOWS}")
    require(_finite(bw_mbps) and 0 < bw_mbps <= 1e5, "bw_mbps", bw_mbps, "in (0, 1e5] Mbps")
    rtts = _per_flow(rtt_ms, flows, "rtt_ms")
    require(all(_finite(r) and 0 < r <= 1e5 for r in rtts), "rtt_ms", rtt_ms,
            "values in (0, 1e5] ms")
    # an integral float (what LinkSpec holds) is accepted: the device queue counts whole packets
    require(buffer_pkts is None or (_finite(buffer_pkts) and float(buffer_pkts).is_integer()
                                    and 1 <= buffer_pkts <= 10**8), "buffer_pkts", buffer_pkts,
            "None (one BDP) or a whole number of packets from 1 to 1e8")
    require(_finite(loss) and 0 <= loss < 1, "loss", loss, "a probability in [0, 1)")
    ccs = [cc_type(c) for c in _per_flow(cc, flows, "cc")]
    require(_finite(duration_s) and duration_s > 0, "duration_s", duration_s, "> 0 s")
    starts = _per_flow(0.0 if start_s is None else start_s, flows, "start_s")
    require(all(_finite(s) and 0 <= s < duration_s for s in starts), "start_s", start_s,
            "values in [0, duration_s)")
    stops = None if stop_s is None else _per_flow(stop_s, flows, "stop_s")
    if stops is not None:
        ok = all(_finite(b) and b > a for a, b in zip(starts, stops, strict=True))
        require(ok, "stop_s", stop_s, "values greater than each flow's start")
    require(isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed < 2**31, "seed",
            seed, "an integer in [0, 2**31)")
    require(_finite(interval_s) and 0 < interval_s <= duration_s, "interval_s", interval_s,
            "in (0, duration_s] s")
    require(duration_s / interval_s <= 10**6, "interval_s", interval_s,
            "at most 1e6 intervals per run")
    require(_finite(warmup_s) and 0 <= warmup_s < duration_s, "warmup_s", warmup_s,
            "in [0, duration_s)")
    require(loss_at in ("ingress", "egress"), "loss_at", loss_at, "ingress or egress")
    require(jitter_us is None or (_finite(jitter_us) and jitter_us >= 0), "jitter_us", jitter_us,
            "None (one packet time) or >= 0 us")
    require(btl_delay_ms is None or (_finite(btl_delay_ms) and 0 <= btl_delay_ms <= min(rtts) / 2),
            "btl_delay_ms", btl_delay_ms, "None or in [0, min(rtt_ms) / 2]")
    require(recovery in ("prr", "classic"), "recovery", recovery, "prr or classic")
    require(hystart_detect in HYSTART_DETECT, "hystart_detect", hystart_detect,
            ", ".join(HYSTART_DETECT))
    require(timeout_s is None or (_finite(timeout_s) and timeout_s > 0), "timeout_s", timeout_s,
            "None or > 0 s")
    if timeout_s is None:  # a run that hangs must not stall a matrix or `ccjax validate` forever
        timeout_s = RUN_TIMEOUT_S

    argv = [str(build()),
            f"--flows={flows}",
            f"--bwMbps={_num(bw_mbps)}",
            "--rttMs=" + ",".join(_num(r) for r in rtts),
            "--startS=" + ",".join(_num(s) for s in starts),
            f"--bufferPkts={0 if buffer_pkts is None else int(buffer_pkts)}",
            f"--loss={_num(loss)}",
            f"--lossAt={loss_at}",
            "--cc=" + ",".join(ccs),
            f"--durationS={_num(duration_s)}",
            f"--seed={seed}",
            f"--intervalS={_num(interval_s)}",
            f"--warmupS={_num(warmup_s)}",
            f"--recovery={recovery}",
            f"--timestamps={'true' if timestamps else 'false'}",
            f"--hystartDetect={HYSTART_DETECT[hystart_detect]}",
            f"--hystart={'true' if hystart else 'false'}"]
    if stops is not None:
        argv.append("--stopS=" + ",".join(_num(s) for s in stops))
    if jitter_us is not None:
        argv.append(f"--jitterUs={_num(jitter_us)}")
    if btl_delay_ms is not None:
        argv.append(f"--btlDelayMs={_num(btl_delay_ms)}")
    try:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"ns-3 dumbbell ran past timeout_s={timeout_s}") from None
    except OSError as e:  # e.g. a prebuilt program of another machine type: exec format error
        raise RuntimeError(f"ns-3 dumbbell {argv[0]} could not start: {e}") from None
    if res.returncode == 2 and res.stderr.startswith("dumbbell:"):
        raise ConfigError(res.stderr.strip().splitlines()[-1].removeprefix("dumbbell: "))
    if res.returncode != 0:
        tail = " | ".join(res.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"ns-3 dumbbell exited with code {res.returncode}: {tail}")
    try:
        out = json.loads(res.stdout)
    except json.JSONDecodeError as e:
        raise RuntimeError(f"ns-3 dumbbell printed no JSON object: {e}") from None
    out["sim"]["argv"] = argv
    return out
