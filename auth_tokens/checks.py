"""System checks (``manage.py check``, ``migrate``) for the authentication settings."""

from django.conf import settings
from django.core.checks import Error, Warning, register

MIN_SECRET_LENGTH = 32


@register("security")
def check_auth_settings(app_configs, **kwargs):
    problems = []
    secret = settings.AGP_AUTH_SECRET
    if secret and len(secret.encode()) < MIN_SECRET_LENGTH:
        # An HS256 key this short can be brute-forced offline from any one token, and
        # then every scope can be forged (RFC 7518 3.2 asks for at least 256 bits).
        problems.append(Error(
            f"AGP_AUTH_SECRET is shorter than {MIN_SECRET_LENGTH} bytes.",
            hint="Generate one with: python -c 'import secrets; print(secrets.token_urlsafe(48))'",
            id="auth_tokens.E001"))
    if bool(settings.AGP_CLIENT_ID) != bool(settings.AGP_CLIENT_SECRET):
        problems.append(Error("Set both AGP_CLIENT_ID and AGP_CLIENT_SECRET, or neither.", id="auth_tokens.E002"))
    if settings.AGP_CLIENT_ID and not secret:
        problems.append(Warning(
            "AGP_CLIENT_ID is set but AGP_AUTH_SECRET is not: authentication is off and the server is open.",
            id="auth_tokens.W001"))
    return problems
