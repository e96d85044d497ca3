"""Python client of the AGP agent governance service.

Depends only on ``requests`` (``verify_signature`` and the transparency-log verifiers also
use ``cryptography`` and ``rfc8785``; a client's own key (``agp_client.keys``) and the
checks of authors' signatures (``agp_client.authors``) use ``joserfc``; each imported when
first used). See docs/client.md.
"""


__version__ = "0.1.0"

from .client import AGPClient  # noqa: E402
from .errors import (  # noqa: E402
    AGPError,
    AuthenticationError,
    ConflictError,
    DelegationHopLimitError,
    DelegationScopeViolationError,
    ExecutionFailedError,
    ForbiddenError,
    FrozenError,
    IdempotencyInProgressError,
    IdempotencyKeyMismatchError,
    ImpactAssessmentRequiredError,
    InvalidTransitionError,
    MethodNotAllowedError,
    NotFoundError,
    OperationTimeoutError,
    PayloadTooLargeError,
    PolicyTestFailedError,
    PrerequisiteFailedError,
    RateLimitedError,
    ScopeError,
    ServerError,
    SignatureError,
    ToolChangedError,
    TransportError,
    UnavailableError,
    UnsupportedMediaTypeError,
    ValidationError,
)
from .signatures import (  # noqa: E402
    delegation_link_payload,
    payload_hash,
    signature_problem,
    signature_problems,
    signed_resources,
    verify_signature,
)
from .transparency import (  # noqa: E402
    VerificationError,
    verify_checkpoint,
    verify_consistency,
    verify_evidence,
    verify_inclusion,
)

__all__ = [
    "AGPClient", "AGPError", "AuthenticationError", "ConflictError", "DelegationHopLimitError",
    "DelegationScopeViolationError", "ExecutionFailedError", "ForbiddenError", "FrozenError", "IdempotencyInProgressError",
    "IdempotencyKeyMismatchError", "ImpactAssessmentRequiredError", "InvalidTransitionError", "MethodNotAllowedError",
    "NotFoundError", "OperationTimeoutError", "PayloadTooLargeError", "PolicyTestFailedError",
    "PrerequisiteFailedError", "RateLimitedError", "ScopeError", "ServerError", "SignatureError", "ToolChangedError",
    "TransportError", "UnavailableError", "UnsupportedMediaTypeError", "ValidationError", "delegation_link_payload",
    "payload_hash", "signature_problem", "signature_problems", "signed_resources", "verify_signature",
    "VerificationError", "verify_checkpoint", "verify_consistency", "verify_evidence", "verify_inclusion",
]
