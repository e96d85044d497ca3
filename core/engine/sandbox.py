"""Rulesets run in engine processes that can be stopped: the time and memory bound of evaluation.

regorus's Python binding has no time or memory limit of its own, and while it runs it holds
the interpreter lock: a ruleset iterating ``numbers.range(1, 5e7)`` ran for 27 s, grew the
web worker to 2.2 GB and stalled every other request of that worker. So no ruleset is
evaluated in a web or Celery process. Each process keeps a small pool of engine processes
(``core/engine/child.py``, started on first use, at most ``AGP_POLICY_PROCESSES``), each
limited to ``AGP_POLICY_MEMORY_MB`` of address space and each keeping its own cache of
compiled rulesets. A request that gets no answer within ``AGP_POLICY_TIMEOUT_MS`` has its
engine process killed (SIGKILL) and replaced; one that allocates past the limit makes the
engine process abort. Either way the evaluation is ``allow: false`` with a reason that
names the limit, and the waiting thread, blocked in ``select`` without the interpreter
lock, never held up anyone else (docs/decisions/policy-engine.md).
"""

import contextlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from .result import EvaluationResult, failure

logger = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("child.py")
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 30  # starting Python and loading regorus; never counted against a ruleset
# What an engine process writes to stderr is logged, at most this many lines per request, each
# cut to this many characters; the rest is counted in one line.
STDERR_LINES = 20
STDERR_LINE_CHARS = 2000
ENGINE_NAME = "regorus"


class EngineUnavailable(Exception):
    """An engine process could not be started (or died while idle)."""


@dataclass(frozen=True)
class Limits:
    timeout: float  # seconds
    memory_bytes: int

    @classmethod
    def from_settings(cls) -> "Limits":
        return cls(timeout=settings.AGP_POLICY_TIMEOUT_MS / 1000, memory_bytes=settings.AGP_POLICY_MEMORY_MB * 2**20)


class _Outcome(Exception):
    """How a request ended when it got no answer: ``timeout`` or ``died``."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class EngineProcess:
    """One engine process and the pipes to it.

    Its stderr is a pipe too, read while a request waits, never inherited: what the engine
    writes there (regorus's "memory allocation of N bytes failed" before an abort, a
    ruleset's ``print``, a Python traceback) would otherwise break the JSON log stream of
    the web or worker process (``AGP_LOG_FORMAT=json``). Each line becomes a log record
    instead, at most ``STDERR_LINES`` of them per request (a ruleset can print a lot).
    """

    def __init__(self, memory_bytes: int):
        self.memory_bytes = memory_bytes
        env = {**os.environ, "RUST_BACKTRACE": "0"}  # an abort prints one line, not a symbolised trace
        self.process = subprocess.Popen(
            [sys.executable, str(CHILD), str(memory_bytes), str(ROOT)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT, close_fds=True)
        self._buffer = b""
        self._stderr_tail = b""
        self._logged = self._dropped = 0
        try:
            ready = self._read_line(time.monotonic() + START_TIMEOUT_SECONDS)
        except _Outcome as outcome:
            self.kill()
            raise EngineUnavailable(f"the engine process did not start ({outcome.kind})") from None
        if json.loads(ready) != {"ready": True}:
            self.kill()
            raise EngineUnavailable("the engine process did not start")

    def request(self, header: dict[str, Any], body: str | None, timeout: float) -> dict[str, Any]:
        """Send one request and wait at most ``timeout`` seconds for its answer.

        Raises ``_Outcome("timeout")`` (the process is killed) or ``_Outcome("died")``.
        """
        message = json.dumps(header, separators=(",", ":")) + "\n"
        if body is not None:
            message += body + "\n"
        deadline = time.monotonic() + timeout
        self._logged = self._dropped = 0
        try:
            self.process.stdin.write(message.encode("utf-8"))
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            self.kill()
            raise _Outcome("died") from None
        try:
            line = self._read_line(deadline)
        except _Outcome:
            self.kill()
            raise
        # The engine writes to stderr before it answers: what it wrote is in the pipe by now.
        self._drain_errors(wait=0)
        return json.loads(line)

    def _read_line(self, deadline: float) -> bytes:
        fd, errors = self.process.stdout.fileno(), self.process.stderr.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Outcome("timeout")
            readable, _, _ = select.select([fd, errors], [], [], remaining)
            if not readable:
                raise _Outcome("timeout")
            if errors in readable:
                self._read_errors(errors)
            if fd not in readable:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._drain_errors(wait=1.0)  # its last words, e.g. why the allocator aborted
                raise _Outcome("died")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _read_errors(self, fd: int) -> bool:
        """Read what is waiting on stderr and log its complete lines; False at its end."""
        chunk = os.read(fd, 1 << 16)
        self._stderr_tail += chunk
        *lines, self._stderr_tail = self._stderr_tail.split(b"\n")
        if not chunk and self._stderr_tail:
            lines, self._stderr_tail = [*lines, self._stderr_tail], b""
        for line in lines:
            self._log_error_line(line)
        return bool(chunk)

    def _drain_errors(self, *, wait: float) -> None:
        """Log what waits on stderr, waiting up to ``wait`` seconds for more (for a process that
        has gone, until its end), then how many lines were left out."""
        with contextlib.suppress(OSError, ValueError):  # already closed
            fd = self.process.stderr.fileno()
            more = True
            while more:
                more = bool(select.select([fd], [], [], wait)[0]) and self._read_errors(fd)
        if self._dropped:
            logger.warning("engine process %s: %s more lines of its output were not logged", self.process.pid,
                           self._dropped)
            self._dropped = 0

    def _log_error_line(self, line: bytes) -> None:
        text = line.decode("utf-8", "replace").rstrip()
        if not text:
            return
        if self._logged >= STDERR_LINES:
            self._dropped += 1
            return
        self._logged += 1
        logger.warning("engine process %s: %s", self.process.pid, text[:STDERR_LINE_CHARS])

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self._drain_errors(wait=1.0)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            try:
                pipe.close()
            except OSError:
                pass

    def died_of_memory(self) -> bool:
        # The allocator aborts (SIGABRT) when the address-space limit refuses an allocation.
        return self.process.returncode == -signal.SIGABRT


class EnginePool:
    """A process's engine processes: taken one per evaluation, returned when it answered.

    Started lazily and bound to the process that started them: after a fork the child
    process starts its own (gunicorn and Celery fork their workers).
    """

    def __init__(self):
        self._lock = threading.Condition()
        self._idle: list[EngineProcess] = []
        self._size = 0
        self._pid = os.getpid()

    @property
    def size(self) -> int:
        """Engine processes of this process, idle or busy."""
        with self._lock:
            return self._size if os.getpid() == self._pid else 0

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:  # inherited from a parent process: those pipes are not ours
            self._idle, self._size, self._pid = [], 0, os.getpid()

    def _acquire(self, memory_bytes: int) -> EngineProcess:
        with self._lock:
            self._check_fork()
            while True:
                while self._idle:
                    process = self._idle.pop()
                    if process.alive and process.memory_bytes == memory_bytes:
                        return process
                    process.kill()
                    self._size -= 1
                if self._size < settings.AGP_POLICY_PROCESSES:
                    self._size += 1
                    break
                self._lock.wait()
        try:
            return EngineProcess(memory_bytes)
        except BaseException:
            self._release(None)
            raise

    def _release(self, process: EngineProcess | None) -> None:
        with self._lock:
            if process is not None and process.alive and os.getpid() == self._pid:
                self._idle.append(process)
            else:
                self._size -= 1
            self._lock.notify()

    def call(self, header: dict[str, Any], body: str | None, limits: Limits) -> dict[str, Any]:
        """One request to an engine process; ``_Outcome`` when it timed out or died."""
        process = self._acquire(limits.memory_bytes)
        try:
            return process.request(header, body, limits.timeout)
        except _Outcome as outcome:
            if outcome.kind == "died" and process.died_of_memory():
                outcome.kind = "memory"
            raise
        finally:
            self._release(process if process.alive else None)

    def broadcast(self, header: dict[str, Any]) -> list[dict[str, Any]]:
        """Send ``header`` to every idle engine process (cache maintenance, tests); each is
        taken out of the pool meanwhile, so no evaluation shares its pipes."""
        with self._lock:
            self._check_fork()
            taken, self._idle = self._idle, []
        answers = []
        for process in taken:
            try:
                answers.append(process.request(header, None, START_TIMEOUT_SECONDS))
            except _Outcome:
                logger.warning("engine process %s did not answer %s", process.process.pid, header.get("op"))
            self._release(process if process.alive else None)
        return answers

    def close(self) -> None:
        """End every idle engine process (at exit, or to apply new limits)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._size -= len(idle)
        for process in idle:
            process.kill()


pool = EnginePool()


LIMIT_STOPPED = "policy evaluation stopped:"


def _limit_reason(kind: str, limits: Limits) -> str:
    if kind == "timeout":
        return (f"{LIMIT_STOPPED} it exceeded the time limit of {round(limits.timeout * 1000)} ms "
                f"(AGP_POLICY_TIMEOUT_MS)")
    if kind == "memory":
        return (f"{LIMIT_STOPPED} it exceeded the memory limit of {limits.memory_bytes // 2**20} MB "
                f"(AGP_POLICY_MEMORY_MB)")
    return f"{LIMIT_STOPPED} the engine process ended unexpectedly (most likely the memory limit)"


def _bounded(run: Callable[[Limits], EvaluationResult]) -> EvaluationResult:
    limits = Limits.from_settings()
    try:
        return run(limits)
    except _Outcome as outcome:
        reason = _limit_reason(outcome.kind, limits)
        logger.warning("%s", reason)
        return failure(reason, engine=ENGINE_NAME)
    except EngineUnavailable as exc:
        logger.error("policy evaluation refused: %s", exc)
        return failure(f"policy evaluation error: {exc}", engine=ENGINE_NAME)


def evaluate(*, ruleset: str, ruleset_hash: str, input_json: str, use_cache: bool = True) -> EvaluationResult:
    """Evaluate in an engine process, under the time and memory limits."""
    def run(limits: Limits) -> EvaluationResult:
        answer = pool.call({"op": "evaluate", "ruleset": ruleset, "ruleset_hash": ruleset_hash,
                            "use_cache": use_cache}, input_json, limits)
        if answer.get("memory"):
            raise _Outcome("memory")
        return EvaluationResult.from_answer(answer)

    return _bounded(run)


def compile_info(*, ruleset: str, ruleset_hash: str,
                 use_cache: bool = True) -> tuple[dict[str, Any], EvaluationResult | None]:
    """Compile in an engine process: ``({"package", "error", "defined", "package_at"}, None)``, or ``({}, refusal)``
    when it does not compile or compiling hit a limit (the refusal's reason says which)."""
    found: dict[str, Any] = {}

    def run(limits: Limits) -> EvaluationResult | None:
        answer = pool.call({"op": "compile", "ruleset": ruleset, "ruleset_hash": ruleset_hash,
                            "use_cache": use_cache}, None, limits)
        if answer["error"]:
            return failure(answer["error"], engine=ENGINE_NAME)
        found.update(answer)
        return None

    refusal = _bounded(run)
    return found, refusal


def cache_clear() -> None:
    for _ in pool.broadcast({"op": "clear"}):
        pass


def cache_stats() -> dict[str, int]:
    """The compiled-ruleset caches of this process's idle engine processes, added up."""
    total = {"size": 0, "hits": 0, "misses": 0}
    for answer in pool.broadcast({"op": "stats"}):
        for key in total:
            total[key] += answer.get(key, 0)
    return total
