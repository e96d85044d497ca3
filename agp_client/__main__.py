"""``python -m agp_client verify-evidence FILE (--jwks JWKS_FILE | --kid KID | --service URL)``: check an
evidence bundle.

Which keys to trust must be said, never taken from the bundle (whoever re-signs a bundle puts
their key in it): a JWKS file obtained from the service, a pinned key id (the RFC 7638
thumbprint the service publishes as ``kid``, checked against the key itself), or the service's
URL, whose ``/.well-known/jwks.json`` is then fetched (the only network use). Exit 0 when
everything in the bundle holds (printing what was checked and which key signed it), 1 naming
the first thing that does not, 2 when a file or the service cannot be read.
"""

from __future__ import annotations

import argparse
import sys
import urllib.request
from pathlib import Path

from . import numbers
from .transparency import VerificationError, verify_evidence


def _load(path: str, what: str):
    try:
        # Numbers exact, as the service wrote them: hashes and signatures are over that form.
        return numbers.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not JSON, or ambiguous JSON (a member named twice)
        raise SystemExit(f"cannot read the {what} {path}: {exc}") from None


def _service_jwks(url: str) -> dict:
    """The service's published keys, ``<url>/.well-known/jwks.json``."""
    request = urllib.request.Request(url.rstrip("/") + "/.well-known/jwks.json", headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - the operator's own URL
            return numbers.loads(response.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"cannot read the service's JWKS at {url}: {exc}") from None


def verify_evidence_command(args: argparse.Namespace) -> int:
    bundle = _load(args.file, "evidence bundle")
    if args.jwks:
        trust, keys = {"jwks": _load(args.jwks, "JWKS")}, f"the JWKS file {args.jwks}"
    elif args.service:
        trust, keys = {"jwks": _service_jwks(args.service)}, f"the service at {args.service}"
    else:
        trust, keys = {"kids": set(args.kid)}, "the pinned key id" + ("s" if len(args.kid) > 1 else "")
    try:
        summary = verify_evidence(bundle, **trust)
    except VerificationError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
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
    trust = verify.add_mutually_exclusive_group(required=True)
    trust.add_argument("--jwks", help="trust the keys of this JWKS file (the service's /.well-known/jwks.json)")
    trust.add_argument("--kid", action="append", help="trust the bundle's key with this RFC 7638 thumbprint (the "
                                                      "service's kid); repeat for several")
    trust.add_argument("--service", metavar="URL", help="trust the keys the service at URL publishes")
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
