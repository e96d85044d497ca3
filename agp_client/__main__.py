"""``python -m agp_client verify-evidence FILE [--jwks JWKS_FILE]``: check an evidence bundle offline.

Exit 0 when everything in the bundle holds (printing what was checked and which key
signed it), 1 naming the first thing that does not, 2 when the file cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import numbers
from .transparency import VerificationError, verify_evidence


def _load(path: str, what: str):
    try:
        # Numbers exact, as the service wrote them: hashes and signatures are over that form.
        return numbers.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or ambiguous JSON (a member named twice)
        raise SystemExit(f"cannot read the {what} {path}: {exc}") from None


def verify_evidence_command(args: argparse.Namespace) -> int:
    bundle = _load(args.file, "evidence bundle")
    jwks = _load(args.jwks, "JWKS") if args.jwks else None
    try:
        summary = verify_evidence(bundle, jwks=jwks)
    except VerificationError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    keys = "the JWKS given" if jwks is not None else "the JWKS in the bundle (compare it with the service's)"
    print(f"OK: evidence for action {summary['action_id']} verified: {summary['signatures']} signatures, "
          f"{summary['ledger_events']} ledger events included in checkpoint {summary['tree_size']} "
          f"(root hash {summary['root_hash']}); signed with key {', '.join(summary['kids'])} from {keys}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agp_client", description="Tools of the AGP client library.")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify-evidence", help="verify an action's evidence bundle with no network",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verify.add_argument("file", help="the bundle: GET /agp/action-envelopes/{action_id}/evidence saved as JSON")
    verify.add_argument("--jwks", help="a JWKS file to trust instead of the keys inside the bundle")
    verify.set_defaults(run=verify_evidence_command)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except SystemExit as exc:
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
