"""Scenario (e), engine alone: ``core.engine.evaluate`` on the sample policy, compiled form cached.

Reuses the policy, input and timing helpers of ``bench/policy_eval.py``. Prints JSON (microseconds).
"""

import hashlib
import json
import sys

from bench.policy_eval import SAMPLE_INPUT, SAMPLE_POLICY, percentiles, timed

if __name__ == "__main__":
    import django

    django.setup()
    from core import engine

    iterations = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    digest = "sha256:" + hashlib.sha256(SAMPLE_POLICY.encode()).hexdigest()
    wall, cpu = timed(lambda: engine.evaluate(ruleset=SAMPLE_POLICY, ruleset_hash=digest, input=SAMPLE_INPUT),
                      iterations, 1000)
    print(json.dumps({"wall": percentiles(wall), "cpu": percentiles(cpu)}))
