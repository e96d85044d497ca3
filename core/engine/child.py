"""An engine process: evaluates rulesets for ``core.engine.sandbox``, one request at a time.

Run as a script (``python core/engine/child.py <memory bytes>``), never imported for its
work: the address-space limit must be in place before regorus is loaded, because regorus's
allocator sizes its reservations by it (unlimited, it reserves about 1 GB up front). A
ruleset that allocates past the limit makes the allocator abort the process; one that runs
past the time limit is killed by the parent. Either way this process dies and the parent
answers ``allow: false``.

Protocol on stdin/stdout, one JSON document a line. First this process writes
``{"ready": true}``. Then, per request, the parent writes a header line
``{"op": "evaluate" | "compile" | "clear" | "stats", "ruleset", "ruleset_hash", "use_cache"}``
and, for ``evaluate``, a line with the Rego input as JSON text; this process answers one
line. stdin closing (the parent went away) ends it.
"""

import resource
import signal
import sys


def _limit_memory(limit_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))


def _answer(document) -> None:
    import json

    sys.stdout.write(json.dumps(document, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def _engine_module():
    """``core.engine.regorus_engine`` without running ``core/engine/__init__.py``.

    The package's ``__init__`` imports Django's settings, the JSON encoder and the OPA client
    for the web side; none of it is needed here, and it would take about half of this
    process's memory (and of its address-space limit, which is the ruleset's). So the
    package is registered as an empty namespace over its folder and the module loaded from it.
    """
    import importlib
    import types
    from pathlib import Path

    package = types.ModuleType("core.engine")
    package.__path__ = [str(Path(__file__).resolve().parent)]
    sys.modules["core.engine"] = package
    return importlib.import_module("core.engine.regorus_engine")


def _serve() -> None:
    import json

    regorus_engine = _engine_module()

    cache = regorus_engine.cache
    _answer({"ready": True})
    lines = iter(sys.stdin.readline, "")
    for header_line in lines:
        header = json.loads(header_line)
        op = header["op"]
        if op == "clear":
            cache.clear()
            _answer({"cleared": True})
            continue
        if op == "stats":
            _answer(cache.stats())
            continue
        ruleset, ruleset_hash = header["ruleset"], header["ruleset_hash"]
        compiled = (cache.get(ruleset=ruleset, ruleset_hash=ruleset_hash) if header.get("use_cache", True)
                    else regorus_engine.compile_ruleset(ruleset=ruleset, ruleset_hash=ruleset_hash))
        if op == "compile":
            _answer({"package": compiled.package, "error": compiled.error, "defined": sorted(compiled.defined),
                     "package_at": compiled.package_at})
            continue
        input_json = next(lines)
        try:
            result = regorus_engine.evaluate_compiled(compiled, input_json.rstrip("\n"))
        except MemoryError:
            _answer({"memory": True})
            continue
        _answer(result.as_answer())



if __name__ == "__main__":
    # The parent ends this process (stdin closed, or SIGKILL); a terminal's Ctrl-C reaches the
    # whole process group and must not print a traceback from here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _limit_memory(int(sys.argv[1]))
    sys.path[0] = sys.argv[2]  # the checkout, instead of this file's folder
    _serve()
